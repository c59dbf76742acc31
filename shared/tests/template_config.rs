//! Every setting granary reads is either a tunable the stack exposes as a parameter, or part of
//! granary's bucket layout, which the roles' grants in `infra/template.yaml` are written for and
//! the template therefore must not change. Asked of the code itself: the keys are the ones
//! `Config::from_lookup` asks for.

use granary::config::Config;
use granary_template::Template;
use std::cell::RefCell;
use std::collections::BTreeSet;

/// Keys whose defaults the IAM grants are written for (items/, logs/, holds/feeder.json, ...).
fn is_layout(key: &str) -> bool {
    key.ends_with("_PREFIX") || key == "GRANARY_TRACKER_KEY" || key == "GRANARY_HOLD_KEY"
}

fn keys_config_reads() -> BTreeSet<String> {
    let asked = RefCell::new(BTreeSet::new());
    let read = Config::from_lookup(|k| {
        asked.borrow_mut().insert(k.to_owned());
        // Enough for every required key to pass, so every later key is asked too.
        Some(
            match k {
                "GRANARY_ITEM_RECORDS"
                | "GRANARY_INGEST_CONTAINER_STEP"
                | "GRANARY_ARRAY_WINDOWS"
                | "GRANARY_ARRAY_RECORDS_AT_SUBMISSION" => "on",
                "GRANARY_INGEST_EZID_URL" => "https://ezid.example",
                "GRANARY_NOT_BEFORE" | "GRANARY_ID_PATTERN" | "GRANARY_ID_DATE_FORMAT" => "",
                "GRANARY_FUNCTION_TIMEOUT_SECS" => "",
                "GRANARY_BRAKE_WINDOW_ENDS" => "200",
                k if k.ends_with("_PREFIX") => "p/",
                k if k.ends_with("_DESTINATIONS") => "s3://b/p/",
                k if k.ends_with("_SECS")
                    || k.ends_with("_BYTES")
                    || k.ends_with("_SHARD")
                    || k.ends_with("_CONCURRENCY")
                    || k.ends_with("_ATTEMPTS")
                    || k.ends_with("_RETRIES")
                    || k.ends_with("_JOBS")
                    || k.ends_with("_RATE")
                    || k.ends_with("_MESSAGES")
                    || k.ends_with("_ENDS")
                    || k.ends_with("_PERCENT") =>
                {
                    "1"
                }
                _ => "x",
            }
            .to_owned(),
        )
    });
    // Every key is asked only if every value passes: a refused one would hide the keys after it.
    if let Err(e) = read {
        panic!("the stand-in values must pass, or later keys go unasked: {e}");
    }
    asked.into_inner()
}

#[test]
fn every_tunable_is_a_parameter_and_the_layout_is_left_alone() {
    let template = Template::granary().unwrap();
    let keys = keys_config_reads();
    assert!(keys.len() > 30, "{keys:?}");
    let globals = &template.doc["Globals"]["Function"]["Environment"]["Variables"];
    // The feeder's, the ingest queue's and archive jobs' tunables are set on the functions that
    // use them, not for every function.
    let own = |f: &str, key: &str| {
        template.doc["Resources"][f]["Properties"]["Environment"]["Variables"][key].clone()
    };
    let mut problems = Vec::new();
    for key in &keys {
        // Set per function (each function's own timeout), checked below.
        if key == "GRANARY_FUNCTION_TIMEOUT_SECS" {
            continue;
        }
        let value = [
            globals[key.as_str()].clone(),
            own("QueueFeederFunction", key),
            own("JobMonitorFunction", key),
            own("IngestDispatcherFunction", key),
            own("ArchiveDispatcherFunction", key),
            own("ArchiveTaskFunction", key),
        ]
        .into_iter()
        .find(|v| !v.is_null())
        .unwrap_or_default();
        let value = &value;
        if is_layout(key) {
            if !value.is_null() {
                problems.push(format!(
                    "{key} is layout the grants depend on; the template sets it"
                ));
            }
            continue;
        }
        if !is_bound(&template, value) {
            problems.push(format!(
                "{key} is not bound to a parameter or resource: {value}"
            ));
        }
    }
    for (id, f) in template.resources_of_type("AWS::Serverless::Function") {
        let own = &f["Properties"]["Environment"]["Variables"]["GRANARY_FUNCTION_TIMEOUT_SECS"];
        if own != &f["Properties"]["Timeout"] {
            problems.push(format!(
                "{id}: GRANARY_FUNCTION_TIMEOUT_SECS {own} is not its Timeout {}",
                f["Properties"]["Timeout"]
            ));
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

/// Whether an environment value comes from a parameter or the stack's own resources: a `Ref` to
/// either, an attribute of a resource, a `Fn::Sub` naming a parameter (a queue's URL built from
/// its name), or a `Fn::If` whose value when set is bound and is empty otherwise (a setting that
/// comes in pairs, both or neither).
fn is_bound(template: &Template, value: &serde_json::Value) -> bool {
    let doc = &template.doc;
    if let Some(name) = value["Ref"].as_str() {
        // Parameters; resources (the bucket, queues, job queue and definition of the stack
        // itself); the stack's name (the metrics' Stack dimension).
        return !doc["Parameters"][name].is_null()
            || !doc["Resources"][name].is_null()
            || name == "AWS::StackName";
    }
    // An attribute of one of the stack's resources (the notification bus's name).
    if let Some(r) = value["Fn::GetAtt"][0].as_str() {
        return !doc["Resources"][r].is_null();
    }
    if let Some(sub) = value["Fn::Sub"].as_str() {
        let params = doc["Parameters"]
            .as_object()
            .map(|p| p.keys())
            .into_iter()
            .flatten();
        return params
            .into_iter()
            .any(|p| sub.contains(&format!("${{{p}}}")));
    }
    if let Some([_, set, unset]) = value["Fn::If"].as_array().map(Vec::as_slice) {
        return unset == "" && is_bound(template, set);
    }
    false
}

/// A value the template lets through must be one the code reads, or the job monitor fails at
/// every start once deployed: the brake's percent parameters and their parser agree, both ways.
#[test]
fn the_brake_percents_the_template_allows_are_the_ones_the_code_reads() {
    let template = Template::granary().unwrap();
    for (param, var) in [
        (
            "BrakeApplicationPercent",
            "GRANARY_BRAKE_APPLICATION_PERCENT",
        ),
        ("BrakeCapacityPercent", "GRANARY_BRAKE_CAPACITY_PERCENT"),
    ] {
        let pattern = template.doc["Parameters"][param]["AllowedPattern"]
            .as_str()
            .unwrap_or_else(|| panic!("{param} has an AllowedPattern"));
        let allowed = regex::Regex::new(pattern).unwrap();
        for value in [
            "off", "0", "0.0", "0.5", "1", "25", "50.5", "99.9", "100", "100.0", "100.5", "150",
            "-5", "x", "",
        ] {
            let read = Config::for_sections(&[granary::config::Section::Retry], |k| match k {
                "GRANARY_BUCKET" => Some("b".to_owned()),
                k if k == var => Some(value.to_owned()),
                _ => None,
            });
            // An empty value is unset for the code (the default) and refused by the pattern: the
            // parameter always has a value.
            if value.is_empty() {
                assert!(!allowed.is_match(value));
                continue;
            }
            assert_eq!(
                allowed.is_match(value),
                read.is_ok(),
                "{param}={value:?}: the template {} it, the code {} it",
                if allowed.is_match(value) {
                    "allows"
                } else {
                    "refuses"
                },
                if read.is_ok() { "reads" } else { "refuses" }
            );
        }
    }
}
