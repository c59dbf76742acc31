//! The template's parameters against the code's parsers: a value the template lets through
//! must be one the code reads. (Which variables the template sets, and from what, is
//! `settings_catalogue.rs`'s.)
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

use granary::config::Config;
use granary_template::Template;

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

/// Every function whose work is paced by a budget of its time reads its timeout from the
/// template: the ingest and archive dispatchers' ticks spend four fifths of it, so a depositor's server that
/// hangs costs a share of a tick and never the whole invocation. (The dispatcher holds no lease;
/// before, it read no timeout, and its tick ran until Lambda killed it.)
#[test]
fn the_dispatchers_read_their_timeout_from_the_template() {
    use granary::config::Function;
    let stack = granary_template::Stack::new("granary-test")
        .with("SubnetIds", "subnet-1")
        .with("SecurityGroupIds", "sg-1")
        .with(
            "ContainerImage",
            "123456789012.dkr.ecr.us-east-1.amazonaws.com/p:1",
        );
    let template = Template::granary().unwrap();
    let resolved = template.resolve(&stack).unwrap();
    for (logical_id, function) in [
        ("IngestDispatcherFunction", Function::IngestDispatcher),
        ("QueueFeederFunction", Function::QueueFeeder),
        ("ArchiveDispatcherFunction", Function::ArchiveDispatcher),
    ] {
        let f = resolved.function(logical_id).unwrap();
        let env = f.environment().unwrap();
        let config = Config::for_sections(function.sections(), |k| env.get(k).cloned()).unwrap();
        let timeout = template.doc["Resources"][logical_id]["Properties"]["Timeout"]
            .as_u64()
            .unwrap();
        assert_eq!(
            config.leases.function_timeout,
            Some(std::time::Duration::from_secs(timeout)),
            "{logical_id}"
        );
    }
}
