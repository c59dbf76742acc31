//! The CloudWatch metrics granary's Lambdas emit, as one table ([`CATALOGUE`]), and how a set of
//! observations becomes Embedded Metric Format documents ([`emf_documents`]): JSON lines a
//! Lambda prints to its log, which CloudWatch Logs turns into metrics with no API call of ours
//! (CloudWatch User Guide, "Specification: Embedded metric format"). The template's dashboard
//! and alarms name only metrics of this table, and every metric of it is on the dashboard
//! (`shared/tests/template_metrics.rs` checks both ways).
//!
//! The rules of the specification this follows: a document is one JSON object whose `_aws`
//! member holds `Timestamp` (milliseconds since the epoch) and `CloudWatchMetrics`, an array of
//! directives, each with a `Namespace`, `Dimensions` (an array of dimension sets, each an array
//! of at most 30 keys naming members of the root) and `Metrics` (at most 100 definitions, each
//! a `Name` naming a member of the root, with an optional `Unit`); a metric's value is a number
//! or an array of at most 100 numbers. Every dimension key a set names must be a string member
//! of the root: documents differing in a dimension's value are separate documents.

use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// The namespace of every granary metric; the stack is a dimension, so several stacks in an
/// account share a namespace and each dashboard and alarm reads its own.
pub const NAMESPACE: &str = "granary";

/// The dimension every metric carries: the CloudFormation stack (`GRANARY_STACK_NAME`).
pub const STACK: &str = "Stack";
/// The platform a granule id names (HLS: L30, S30; `unknown` when the id does not say).
pub const PLATFORM: &str = "Platform";
/// How a failure ended ([`crate::domain::classify::FailureKind::class`]), or
/// `attempts_exhausted` for the requeuer's give-up.
pub const FAILURE_CLASS: &str = "FailureClass";

/// Per the specification: metrics a directive defines, values an array holds.
pub const MAX_METRICS_PER_DIRECTIVE: usize = 100;
pub const MAX_VALUES_PER_METRIC: usize = 100;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Metric {
    GranulesSubmitted,
    GranulesSucceeded,
    GranulesRetried,
    GranulesDeadLettered,
    GranulesCancelled,
    EventsHandled,
    EventsRejected,
    FeederWindowSize,
    FeederRowsLeft,
    FeederRowsSettled,
    ReconcilerFinds,
    SubmitJobThrottles,
    FeederBraked,
    SpendCapHeld,
}

/// How observations of a metric combine within one document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Counted: the observations are summed into one value.
    Count,
    /// Sampled: each observation is a value of its own (an array), so CloudWatch's statistics
    /// (average, maximum) see each one.
    Sample,
}

/// One row of the catalogue.
#[derive(Debug, Clone, Copy)]
pub struct MetricSpec {
    pub metric: Metric,
    pub name: &'static str,
    pub unit: &'static str,
    pub kind: Kind,
    /// The dimensions an observation carries besides [`STACK`] (their values come with it).
    pub dimensions: &'static [&'static str],
    /// The functions that emit it (`config::Function` names).
    pub emitted_by: &'static [&'static str],
    pub what: &'static str,
}

pub const CATALOGUE: [MetricSpec; 14] = [
    MetricSpec {
        metric: Metric::GranulesSubmitted,
        name: "GranulesSubmitted",
        unit: "Count",
        kind: Kind::Count,
        dimensions: &[],
        emitted_by: &["queue-feeder", "requeuer", "item-sweeper"],
        what: "granule attempts submitted to Batch (first attempts by the feeder, retries by the requeuer, a window another campaign's feeder left taken over by the reconciler)",
    },
    MetricSpec {
        metric: Metric::GranulesSucceeded,
        name: "GranulesSucceeded",
        unit: "Count",
        kind: Kind::Count,
        dimensions: &[PLATFORM],
        emitted_by: &["job-monitor", "item-sweeper"],
        what: "granules whose job succeeded (each end counted once: a duplicate event found as such is not; the reconciler's finds count here too)",
    },
    MetricSpec {
        metric: Metric::GranulesRetried,
        name: "GranulesRetried",
        unit: "Count",
        kind: Kind::Count,
        dimensions: &[PLATFORM, FAILURE_CLASS],
        emitted_by: &["job-monitor", "item-sweeper"],
        what: "failed attempts sent to the retry queue, by platform and failure class",
    },
    MetricSpec {
        metric: Metric::GranulesDeadLettered,
        name: "GranulesDeadLettered",
        unit: "Count",
        kind: Kind::Count,
        dimensions: &[PLATFORM, FAILURE_CLASS],
        emitted_by: &["job-monitor", "requeuer", "item-sweeper"],
        what: "granules sent to the failure DLQ: a failure granary does not retry (monitor), or the last attempt spent (requeuer, class attempts_exhausted)",
    },
    MetricSpec {
        metric: Metric::GranulesCancelled,
        name: "GranulesCancelled",
        unit: "Count",
        kind: Kind::Count,
        dimensions: &[PLATFORM],
        emitted_by: &["job-monitor", "item-sweeper"],
        what: "attempts `granary cancel` ended, kept for `granary resume --cancelled` (neither retried nor dead-lettered)",
    },
    MetricSpec {
        metric: Metric::EventsHandled,
        name: "EventsHandled",
        unit: "Count",
        kind: Kind::Count,
        dimensions: &[],
        emitted_by: &["job-monitor"],
        what: "Batch events the monitor handled (finished jobs, duplicates, non-terminal states, array parents)",
    },
    MetricSpec {
        metric: Metric::EventsRejected,
        name: "EventsRejected",
        unit: "Count",
        kind: Kind::Count,
        dimensions: &[],
        emitted_by: &["job-monitor"],
        what: "events no delivery could handle, recorded under rejects/ and dead-lettered with their reason",
    },
    MetricSpec {
        metric: Metric::FeederWindowSize,
        name: "FeederWindowSize",
        unit: "Count",
        kind: Kind::Sample,
        dimensions: &[],
        emitted_by: &["queue-feeder"],
        what: "granules submitted with one feeder window (one value a window that submitted any)",
    },
    MetricSpec {
        metric: Metric::FeederRowsLeft,
        name: "FeederRowsLeft",
        unit: "Count",
        kind: Kind::Sample,
        dimensions: &[],
        emitted_by: &["queue-feeder"],
        what: "inventory rows the feeder has not yet settled, after each run that read its tracker (its lag behind the inventories)",
    },
    MetricSpec {
        metric: Metric::FeederRowsSettled,
        name: "FeederRowsSettled",
        unit: "Count",
        kind: Kind::Count,
        dimensions: &[],
        emitted_by: &["queue-feeder"],
        what: "inventory rows a feeder run settled (submitted, found submitted, known before, set aside): its progress, also when it stalled part-way",
    },
    MetricSpec {
        metric: Metric::ReconcilerFinds,
        name: "ReconcilerFinds",
        unit: "Count",
        kind: Kind::Count,
        dimensions: &[],
        emitted_by: &["item-sweeper"],
        what: "ends the reconciler found whose events never arrived (handled as the monitor would)",
    },
    MetricSpec {
        metric: Metric::SubmitJobThrottles,
        name: "SubmitJobThrottles",
        unit: "Count",
        kind: Kind::Count,
        dimensions: &[],
        emitted_by: &["queue-feeder", "requeuer", "item-sweeper", "ingest-dispatcher"],
        what: "SubmitJob calls Batch refused with TooManyRequestsException (the SDK does not retry SubmitJob: each refusal is granary's to back off from and try again, never sent twice)",
    },
    MetricSpec {
        metric: Metric::FeederBraked,
        name: "FeederBraked",
        unit: "Count",
        kind: Kind::Count,
        dimensions: &[],
        emitted_by: &["job-monitor"],
        what: "holds the automatic brake placed on the feeder (too many application failures, or Spot and capacity ends, among the latest job ends)",
    },
    MetricSpec {
        metric: Metric::SpendCapHeld,
        name: "SpendCapHeld",
        unit: "Count",
        kind: Kind::Count,
        dimensions: &[],
        emitted_by: &["queue-feeder"],
        what: "holds the feeder placed at the campaign's spend cap (`granary pace --budget`)",
    },
];

impl Metric {
    /// Its row: the catalogue lists the metrics in the enum's order (a test holds it to that).
    pub fn spec(self) -> &'static MetricSpec {
        &CATALOGUE[self as usize]
    }
}

/// The values of an observation's dimensions (besides the stack), by dimension key.
pub type DimensionValues = BTreeMap<&'static str, String>;

/// What is observed: a metric and the values of its dimensions (besides the stack).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Observed {
    pub metric: Metric,
    pub dimensions: DimensionValues,
}

/// The documents for `observations` (each metric's observed values, in order), one document per
/// distinct set of dimension values, every metric published both with its dimensions and with
/// the stack alone (so a dashboard reads totals without metric math).
pub fn emf_documents(
    stack: &str,
    timestamp_ms: i64,
    observations: &BTreeMap<Observed, Vec<f64>>,
) -> Vec<Value> {
    // Group by dimension values: one document each.
    let mut groups: BTreeMap<&DimensionValues, Vec<(Metric, &Vec<f64>)>> = BTreeMap::new();
    for (observed, values) in observations {
        if !values.is_empty() {
            groups
                .entry(&observed.dimensions)
                .or_default()
                .push((observed.metric, values));
        }
    }
    let mut out = Vec::new();
    for (dimensions, metrics) in groups {
        let mut sets = vec![vec![STACK.to_owned()]];
        if !dimensions.is_empty() {
            let mut all = vec![STACK.to_owned()];
            all.extend(dimensions.keys().map(|k| (*k).to_owned()));
            sets.push(all);
        }
        // Sampled values go out at most 100 to a document.
        let mut rounds: Vec<Map<String, Value>> = Vec::new();
        let mut definitions: Vec<Vec<Value>> = Vec::new();
        for (metric, values) in metrics {
            let spec = metric.spec();
            let chunks: Vec<Value> = match spec.kind {
                Kind::Count => vec![json!(values.iter().sum::<f64>())],
                Kind::Sample => values
                    .chunks(MAX_VALUES_PER_METRIC)
                    .map(|c| json!(c))
                    .collect(),
            };
            for (i, value) in chunks.into_iter().enumerate() {
                if rounds.len() <= i {
                    rounds.push(Map::new());
                    definitions.push(Vec::new());
                }
                rounds[i].insert(spec.name.to_owned(), value);
                definitions[i].push(json!({"Name": spec.name, "Unit": spec.unit}));
            }
        }
        for (mut root, defs) in rounds.into_iter().zip(definitions) {
            root.insert(STACK.to_owned(), json!(stack));
            for (k, v) in dimensions {
                root.insert((*k).to_owned(), json!(v));
            }
            root.insert(
                "_aws".to_owned(),
                json!({
                    "Timestamp": timestamp_ms,
                    "CloudWatchMetrics": [{
                        "Namespace": NAMESPACE,
                        "Dimensions": sets,
                        "Metrics": defs,
                    }],
                }),
            );
            out.push(Value::Object(root));
        }
    }
    out
}

/// Why a document is not valid Embedded Metric Format, checked against the specification's
/// rules (above): `None` when it is. Used by the tests on every document the code emits.
pub fn emf_violation(doc: &Value) -> Option<String> {
    let Some(root) = doc.as_object() else {
        return Some("not a JSON object".into());
    };
    let Some(aws) = root.get("_aws").and_then(Value::as_object) else {
        return Some("no _aws object".into());
    };
    if !aws.get("Timestamp").is_some_and(Value::is_i64) {
        return Some("_aws.Timestamp is not an integer".into());
    }
    let Some(directives) = aws.get("CloudWatchMetrics").and_then(Value::as_array) else {
        return Some("_aws.CloudWatchMetrics is not an array".into());
    };
    for d in directives {
        if !d.get("Namespace").is_some_and(Value::is_string) {
            return Some("a directive without a Namespace".into());
        }
        let Some(sets) = d.get("Dimensions").and_then(Value::as_array) else {
            return Some("a directive without Dimensions".into());
        };
        for set in sets {
            let Some(keys) = set.as_array() else {
                return Some("a dimension set that is not an array".into());
            };
            if keys.len() > 30 {
                return Some("a dimension set of more than 30 keys".into());
            }
            for k in keys {
                let named = k.as_str().and_then(|k| root.get(k));
                if !named.is_some_and(Value::is_string) {
                    return Some(format!("dimension {k} is not a string member of the root"));
                }
            }
        }
        let Some(metrics) = d.get("Metrics").and_then(Value::as_array) else {
            return Some("a directive without Metrics".into());
        };
        if metrics.len() > MAX_METRICS_PER_DIRECTIVE {
            return Some("more than 100 metrics in a directive".into());
        }
        for m in metrics {
            let Some(name) = m.get("Name").and_then(Value::as_str) else {
                return Some("a metric without a Name".into());
            };
            let ok = match root.get(name) {
                Some(Value::Number(_)) => true,
                Some(Value::Array(values)) => {
                    values.len() <= MAX_VALUES_PER_METRIC && values.iter().all(Value::is_number)
                }
                _ => false,
            };
            if !ok {
                return Some(format!("metric {name} has no numeric value at the root"));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observed(metric: Metric, dims: &[(&'static str, &str)]) -> Observed {
        Observed {
            metric,
            dimensions: dims.iter().map(|(k, v)| (*k, (*v).to_owned())).collect(),
        }
    }

    #[test]
    fn the_catalogue_names_each_metric_once_with_its_declared_dimensions() {
        let mut names: Vec<&str> = CATALOGUE.iter().map(|s| s.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), CATALOGUE.len());
        for (i, spec) in CATALOGUE.iter().enumerate() {
            assert_eq!(spec.metric as usize, i, "{} out of order", spec.name);
            assert_eq!(spec.metric.spec().name, spec.name);
            assert!(!spec.emitted_by.is_empty() && !spec.what.is_empty());
        }
    }

    #[test]
    fn counts_are_summed_samples_kept_and_each_set_of_dimension_values_is_a_document() {
        let mut obs = BTreeMap::new();
        obs.insert(observed(Metric::GranulesSubmitted, &[]), vec![200.0, 150.0]);
        obs.insert(observed(Metric::FeederWindowSize, &[]), vec![200.0, 150.0]);
        let l30 = [(PLATFORM, "L30"), (FAILURE_CLASS, "spot_interruption")];
        obs.insert(observed(Metric::GranulesRetried, &l30), vec![1.0, 1.0, 1.0]);
        let s30 = [(PLATFORM, "S30"), (FAILURE_CLASS, "spot_interruption")];
        obs.insert(observed(Metric::GranulesRetried, &s30), vec![1.0]);
        let docs = emf_documents("prod", 1_700_000_000_000, &obs);
        assert_eq!(docs.len(), 3);
        for d in &docs {
            assert_eq!(emf_violation(d), None, "{d}");
            assert_eq!(d["Stack"], "prod");
            assert_eq!(d["_aws"]["CloudWatchMetrics"][0]["Namespace"], NAMESPACE);
        }
        let plain = docs.iter().find(|d| d.get("Platform").is_none()).unwrap();
        assert_eq!(plain["GranulesSubmitted"], json!(350.0));
        assert_eq!(plain["FeederWindowSize"], json!([200.0, 150.0]));
        assert_eq!(
            plain["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            json!([["Stack"]])
        );
        let l30 = docs.iter().find(|d| d["Platform"] == "L30").unwrap();
        assert_eq!(l30["GranulesRetried"], json!(3.0));
        assert_eq!(l30["FailureClass"], "spot_interruption");
        assert_eq!(
            l30["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            json!([["Stack"], ["Stack", "FailureClass", "Platform"]])
        );
    }

    #[test]
    fn more_than_a_hundred_samples_go_out_in_several_documents() {
        let mut obs = BTreeMap::new();
        obs.insert(observed(Metric::FeederWindowSize, &[]), vec![1.0; 250]);
        obs.insert(observed(Metric::GranulesSubmitted, &[]), vec![1.0; 250]);
        let docs = emf_documents("s", 0, &obs);
        assert_eq!(docs.len(), 3);
        let samples: usize = docs
            .iter()
            .map(|d| d["FeederWindowSize"].as_array().map_or(0, Vec::len))
            .sum();
        assert_eq!(samples, 250);
        let counted: f64 = docs
            .iter()
            .filter_map(|d| d["GranulesSubmitted"].as_f64())
            .sum();
        assert_eq!(counted, 250.0);
        assert!(docs.iter().all(|d| emf_violation(d).is_none()));
    }

    #[test]
    fn violations_are_named() {
        let ok = json!({"Stack": "s", "N": 1, "_aws": {"Timestamp": 1, "CloudWatchMetrics": [
            {"Namespace": "granary", "Dimensions": [["Stack"]], "Metrics": [{"Name": "N"}]}]}});
        assert_eq!(emf_violation(&ok), None);
        let mut no_dim = ok.clone();
        no_dim.as_object_mut().unwrap().remove("Stack");
        assert!(emf_violation(&no_dim).unwrap().contains("dimension"));
        let mut no_value = ok.clone();
        no_value.as_object_mut().unwrap().remove("N");
        assert!(emf_violation(&no_value).unwrap().contains("metric N"));
        let mut no_time = ok;
        no_time["_aws"].as_object_mut().unwrap().remove("Timestamp");
        assert!(emf_violation(&no_time).unwrap().contains("Timestamp"));
    }
}
