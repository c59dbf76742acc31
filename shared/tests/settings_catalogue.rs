//! The settings catalogue (`granary::config::catalogue`) against everything it describes: the
//! variables the code reads, the template's parameters and environment, the code's defaults,
//! and docs/configuration.md, which is generated from it.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

use granary::config::catalogue::{self, Kind, PARAMETERS, SETTINGS, TEST_SWITCHES};
use granary::config::{Config, Section};
use granary_template::Template;
use regex::Regex;
use serde_json::Value;
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Non-test Rust sources: test files and the `#[cfg(test)]` tail of a file left out.
fn sources() -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut dirs: Vec<PathBuf> = [
        "shared/src",
        "cli/src",
        "local/src",
        "functions",
        "bench/src",
    ]
    .iter()
    .map(|d| root().join(d))
    .collect();
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            if path.is_dir() {
                if name != "tests" && name != "target" {
                    dirs.push(path);
                }
            } else if name.ends_with(".rs") && name != "tests.rs" {
                let text = std::fs::read_to_string(&path).unwrap();
                let body = match text.find("#[cfg(test)]\nmod tests") {
                    Some(i) => text[..i].to_owned(),
                    None => text,
                };
                out.push((path, body));
            }
        }
    }
    out
}

fn vars_in_code() -> BTreeSet<String> {
    let var = Regex::new(r#""(GRANARY_[A-Z0-9_]+)""#).unwrap();
    sources()
        .iter()
        .flat_map(|(_, text)| {
            var.captures_iter(text)
                .map(|c| c[1].to_owned())
                .collect::<Vec<_>>()
        })
        .collect()
}

fn catalogued() -> BTreeSet<String> {
    SETTINGS
        .iter()
        .map(|s| s.var)
        .chain(TEST_SWITCHES.iter().map(|t| t.var))
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_code_reads_only_catalogued_variables_and_every_entry_is_read() {
    let code = vars_in_code();
    let listed = catalogued();
    let missing: Vec<_> = code.difference(&listed).collect();
    let dead: Vec<_> = listed.difference(&code).collect();
    assert!(
        missing.is_empty(),
        "read but not in the catalogue: {missing:?}"
    );
    assert!(dead.is_empty(), "catalogued but read nowhere: {dead:?}");
    let mut seen = BTreeSet::new();
    for v in SETTINGS
        .iter()
        .map(|s| s.var)
        .chain(TEST_SWITCHES.iter().map(|t| t.var))
    {
        assert!(seen.insert(v), "{v} is catalogued twice");
    }
}

/// A stand-in value every parser takes, so that every key after it is asked too.
fn stand_in(k: &str) -> &'static str {
    match k {
        "GRANARY_ITEM_RECORDS"
        | "GRANARY_INGEST_CONTAINER_STEP"
        | "GRANARY_ARRAY_WINDOWS"
        | "GRANARY_ARRAY_RETRIES" => "on",
        "GRANARY_INGEST_EZID_URL" => "https://ezid.example",
        "GRANARY_NOT_BEFORE"
        | "GRANARY_ID_PATTERN"
        | "GRANARY_ID_DATE_FORMAT"
        | "GRANARY_FUNCTION_TIMEOUT_SECS" => "",
        "GRANARY_BRAKE_WINDOW_ENDS" => "200",
        k if k.ends_with("_DESTINATIONS") => "s3://b/p/",
        k if [
            "_SECS",
            "_BYTES",
            "_SHARD",
            "_CONCURRENCY",
            "_ATTEMPTS",
            "_RETRIES",
            "_JOBS",
            "_RATE",
            "_MESSAGES",
            "_PERCENT",
            "_MIB",
        ]
        .iter()
        .any(|s| k.ends_with(s)) =>
        {
            "1"
        }
        _ => "x",
    }
}

fn asked_by(sections: &[Section]) -> BTreeSet<String> {
    let asked = RefCell::new(BTreeSet::new());
    let read = Config::for_sections(sections, |k| {
        asked.borrow_mut().insert(k.to_owned());
        Some(stand_in(k).to_owned())
    });
    if let Err(e) = read {
        panic!("the stand-in values must pass, or later keys go unasked: {e}");
    }
    asked.into_inner()
}

/// Each section reads exactly the catalogue's entries for it (and the layout's, which every
/// part reads): the "read by" column is the code's own.
#[test]
fn each_section_reads_exactly_its_catalogued_variables() {
    let layout = asked_by(&[Section::Layout]);
    for section in [
        Section::Layout,
        Section::Feeder,
        Section::Jobs,
        Section::Queues,
        Section::Retry,
        Section::Leases,
        Section::Importer,
        Section::Ingest,
        Section::Archive,
    ] {
        let asked: BTreeSet<String> = asked_by(&[section])
            .into_iter()
            .filter(|k| section == Section::Layout || !layout.contains(k))
            .collect();
        let listed: BTreeSet<String> = SETTINGS
            .iter()
            .filter(|s| s.sections.contains(&section))
            .map(|s| s.var.to_owned())
            .chain(
                TEST_SWITCHES
                    .iter()
                    .filter(|t| section == Section::Jobs && t.var == "GRANARY_ARRAY_RETRIES")
                    .map(|t| t.var.to_owned()),
            )
            .collect();
        assert_eq!(asked, listed, "{section:?}");
    }
}

/// A variable set to its catalogued default reads as if unset.
#[test]
fn the_catalogued_defaults_are_the_codes() {
    let base = [
        ("GRANARY_BUCKET", "b"),
        ("GRANARY_JOB_QUEUE", "q"),
        ("GRANARY_JOB_DEFINITION", "d"),
        ("GRANARY_RETRY_QUEUE_URL", "r"),
        ("GRANARY_FAILURE_DLQ_URL", "f"),
        ("GRANARY_DOWNSTREAM_QUEUE_URL", "u"),
    ];
    let load = |extra: Option<(&str, &str)>| {
        let c = Config::from_lookup(|k| {
            extra
                .iter()
                .chain(base.iter())
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        })
        .unwrap_or_else(|e| panic!("{extra:?}: {e}"));
        format!("{c:?}")
    };
    let unset = load(None);
    for s in SETTINGS
        .iter()
        .filter(|s| !s.sections.is_empty() && !s.default.is_empty())
    {
        assert_eq!(
            load(Some((s.var, s.default))),
            unset,
            "{}={}",
            s.var,
            s.default
        );
    }
}

fn template() -> Template {
    Template::granary().expect("infra/template.yaml reads")
}

#[test]
fn every_template_parameter_is_catalogued_once_with_the_templates_default() {
    let t = template();
    let params = t.doc["Parameters"].as_object().unwrap();
    let in_template: BTreeSet<&str> = params.keys().map(String::as_str).collect();
    let mut catalogued = BTreeSet::new();
    for p in SETTINGS
        .iter()
        .filter_map(|s| s.parameter)
        .chain(PARAMETERS.iter().map(|p| p.name))
    {
        assert!(catalogued.insert(p), "{p} is catalogued twice");
    }
    assert_eq!(
        in_template, catalogued,
        "the template's parameters and the catalogue's"
    );
    let default_of = |name: &str| match &params[name]["Default"] {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    };
    for p in PARAMETERS {
        assert_eq!(
            default_of(p.name).as_deref(),
            p.default,
            "{}'s default",
            p.name
        );
    }
    for s in SETTINGS.iter().filter(|s| s.parameter.is_some()) {
        let p = s.parameter.unwrap_or_default();
        let d = default_of(p).unwrap_or_else(|| panic!("{p} has a default"));
        let expected = s.stack.unwrap_or(s.default);
        // The template writes switches as true/false, the code reads on/off as well.
        let same =
            d == expected || matches!((d.as_str(), expected), ("true", "on") | ("false", "off"));
        assert!(
            same,
            "{p} defaults to {d:?}, the catalogue says {expected:?}"
        );
    }
}

/// How the template sets each variable agrees with its kind: a choice from its parameter, wiring
/// from the stack's resources, a fixed value as a literal; and each function's timeout variable
/// is its timeout.
#[test]
fn the_template_sets_each_variable_as_its_kind_says() {
    let t = template();
    let doc = &t.doc;
    let globals = doc["Globals"]["Function"]["Environment"]["Variables"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let mut problems = Vec::new();
    for (id, f) in t.resources_of_type("AWS::Serverless::Function") {
        let mut env = globals.clone();
        if let Some(own) = f["Properties"]["Environment"]["Variables"].as_object() {
            env.extend(own.clone());
        }
        for (var, value) in &env {
            // Not granary's (RUST_LOG); each function's own timeout, checked against its Timeout
            // below; each submitter's share of the SubmitJob budget, which
            // `the_submitters_shares_of_the_submit_job_budget_leave_room_in_the_account` checks.
            if !var.starts_with("GRANARY_")
                || var == "GRANARY_FUNCTION_TIMEOUT_SECS"
                || var == "GRANARY_SUBMIT_JOB_RATE"
            {
                continue;
            }
            let Some(s) = catalogue::setting(var) else {
                problems.push(format!("{id}: {var} is not a catalogued setting"));
                continue;
            };
            let ok = match s.kind {
                Kind::Choice => refers_to(value, s.parameter.unwrap_or_default()),
                Kind::Wiring => is_resource(doc, value),
                Kind::Fixed => value.as_str() == Some(s.stack.unwrap_or(s.default)),
            };
            if !ok {
                problems.push(format!("{id}: {var} ({:?}) is set to {value}", s.kind));
            }
        }
        let timeout = &f["Properties"]["Timeout"];
        let own = &env
            .get("GRANARY_FUNCTION_TIMEOUT_SECS")
            .cloned()
            .unwrap_or_default();
        if own.as_str() != Some(timeout.to_string().as_str()) {
            problems.push(format!(
                "{id}: GRANARY_FUNCTION_TIMEOUT_SECS {own} is not its Timeout {timeout}"
            ));
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

fn refers_to(value: &Value, parameter: &str) -> bool {
    value["Ref"] == parameter
        || value["Fn::If"]
            .as_array()
            .is_some_and(|a| a.iter().any(|v| refers_to(v, parameter)))
}

/// A resource of the stack, an attribute of one, the stack's name, or a URL built from a
/// parameter naming a queue (`Fn::If` with "" when the resource is not made).
fn is_resource(doc: &Value, value: &Value) -> bool {
    if let Some(name) = value["Ref"].as_str() {
        return !doc["Resources"][name].is_null() || name == "AWS::StackName";
    }
    if let Some(r) = value["Fn::GetAtt"][0].as_str() {
        return !doc["Resources"][r].is_null();
    }
    if value["Fn::Sub"].is_string() {
        return true;
    }
    if let Some([_, set, unset]) = value["Fn::If"].as_array().map(Vec::as_slice) {
        return unset == "" && is_resource(doc, set);
    }
    false
}

#[test]
fn docs_configuration_md_is_generated_from_the_catalogue() {
    let path = root().join("docs/configuration.md");
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == catalogue::markdown(),
        "docs/configuration.md is stale: run `make docs`"
    );
}

/// The counts the catalogue holds itself to: at most 45 operator choices and 50 template
/// parameters.
#[test]
fn the_catalogue_stays_small() {
    let choices = SETTINGS.iter().filter(|s| s.kind == Kind::Choice).count();
    let parameters = template().doc["Parameters"]
        .as_object()
        .map_or(0, |p| p.len());
    assert!(choices <= 45, "{choices} operator choices");
    assert!(parameters <= 50, "{parameters} template parameters");
}

/// Where a setting takes effect is one of the functions that read it.
#[test]
fn a_narrower_use_names_functions_that_read_the_setting() {
    for s in SETTINGS.iter().filter(|s| !s.used_by.is_empty()) {
        let readers: Vec<&str> = s.functions().iter().map(|f| f.name()).collect();
        for user in s.used_by {
            assert!(readers.contains(user), "{}: {user} does not read it", s.var);
        }
    }
}
