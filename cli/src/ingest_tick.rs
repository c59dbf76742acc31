//! `granary ingest tick`'s summary, for a person: what the passes did, added up, in the order a
//! job moves through the dispatcher, and what to look at when something did not go.

use granary::handlers::ingest::TickSummary;
use std::collections::BTreeMap;

/// The summary's lines: each counter of `TickSummary` (by its serialised name) and what it
/// counts, in the order of the pipeline. A counter not listed here is still printed, by name.
const PHRASES: [(&str, &str); 24] = [
    ("released", "held batches and jobs released"),
    ("batches_spawned", "batches made from submissions"),
    ("batches_held", "batches held"),
    ("jobs_created", "jobs created"),
    ("estimated", "jobs estimated"),
    ("provisioned", "jobs provisioned"),
    ("dispatched", "jobs dispatched"),
    ("held", "jobs held"),
    ("waiting_for_capacity", "jobs waiting for capacity"),
    ("downloaded", "jobs downloaded"),
    ("processing_submitted", "processing jobs submitted"),
    ("processing_retried", "processing jobs retried"),
    ("processed", "jobs processed"),
    ("stored", "objects stored"),
    ("recorded", "jobs recorded"),
    ("notified", "depositors notified"),
    ("failed", "jobs failed"),
    ("batches_reported", "batches reported"),
    ("batches_cleaned", "batches cleaned up"),
    (
        "batches_waiting_for_archive",
        "batches waiting for their archive",
    ),
    ("repaired", "stale markers repaired"),
    (
        "slow_attempts",
        "downloads or callbacks timed out (retried next tick)",
    ),
    (
        "waiting_on_hosts",
        "requests not tried: their server hung this tick",
    ),
    (
        "out_of_time",
        "steps left to the next tick (the tick's time ran out)",
    ),
];

/// The counters of all passes, added up by name.
fn totals(passes: &[TickSummary]) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for pass in passes {
        if let Ok(serde_json::Value::Object(fields)) = serde_json::to_value(pass) {
            for (k, v) in fields {
                *out.entry(k).or_insert(0) += v.as_u64().unwrap_or(0);
            }
        }
    }
    out
}

/// What the passes did, a line a thing that happened.
pub fn describe(passes: &[TickSummary], until_quiet: bool) -> String {
    let mut totals = totals(passes);
    let errors = totals.remove("errors").unwrap_or(0);
    let quiet = passes.last().is_some_and(|p| *p == TickSummary::default());
    let mut out = match (passes.len(), until_quiet && quiet) {
        (1, _) => "1 pass of the dispatcher".to_owned(),
        (n, true) => format!("{n} passes of the dispatcher, the last changing nothing"),
        (n, false) => format!("{n} passes of the dispatcher"),
    };
    let mut lines = Vec::new();
    for (key, phrase) in PHRASES {
        if let Some(n) = totals.remove(key).filter(|n| *n > 0) {
            lines.push(format!("  {n:>8}  {phrase}"));
        }
    }
    lines.extend(
        totals
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| format!("  {n:>8}  {k}")),
    );
    if lines.is_empty() {
        out.push_str(": nothing to do (no batch or job moved)\n");
    } else {
        out.push_str(":\n");
        out.push_str(&lines.join("\n"));
        out.push('\n');
    }
    if errors > 0 {
        out.push_str(&format!(
            "  {errors:>8}  steps failed (each logged with its error; tried again next tick)\n"
        ));
    } else {
        out.push_str("  no step failed\n");
    }
    let hosts: std::collections::BTreeSet<&String> =
        passes.iter().flat_map(|p| p.hanging_hosts.iter()).collect();
    if !hosts.is_empty() {
        let hosts: Vec<&str> = hosts.into_iter().map(String::as_str).collect();
        out.push_str(&format!("  hung: {}\n", hosts.join(", ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_adds_the_passes_up_in_the_pipelines_order_and_names_what_went_wrong() {
        let first = TickSummary {
            batches_spawned: 1,
            jobs_created: 3,
            dispatched: 3,
            ..TickSummary::default()
        };
        let mut second = TickSummary {
            dispatched: 2,
            failed: 1,
            errors: 2,
            ..TickSummary::default()
        };
        second.hanging_hosts.insert("depositor.example".into());
        let text = describe(&[first, second, TickSummary::default()], true);
        assert_eq!(
            text,
            "3 passes of the dispatcher, the last changing nothing:\n\
             \x20        1  batches made from submissions\n\
             \x20        3  jobs created\n\
             \x20        5  jobs dispatched\n\
             \x20        1  jobs failed\n\
             \x20        2  steps failed (each logged with its error; tried again next tick)\n\
             \x20 hung: depositor.example\n"
        );
        assert!(!text.contains("TickSummary"), "no Debug output");
        assert_eq!(
            describe(&[TickSummary::default()], false),
            "1 pass of the dispatcher: nothing to do (no batch or job moved)\n  no step failed\n"
        );
    }

    #[test]
    fn every_counter_has_its_phrase() {
        let named: Vec<&str> = PHRASES.iter().map(|(k, _)| *k).collect();
        let serde_json::Value::Object(fields) =
            serde_json::to_value(TickSummary::default()).unwrap()
        else {
            panic!("TickSummary serialises as an object")
        };
        for k in fields.keys() {
            assert!(
                k == "errors" || named.contains(&k.as_str()),
                "{k} has no phrase"
            );
        }
    }
}
