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
