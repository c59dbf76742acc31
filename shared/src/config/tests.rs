use super::*;
use crate::domain::lifecycle::ActiveSlots;
use std::collections::HashMap;
use std::time::Duration;

fn base() -> HashMap<&'static str, &'static str> {
    HashMap::from([
        ("GRANARY_BUCKET", "b"),
        ("GRANARY_JOB_QUEUE", "q"),
        ("GRANARY_JOB_DEFINITION", "d"),
        ("GRANARY_RETRY_QUEUE_URL", "r"),
        ("GRANARY_FAILURE_DLQ_URL", "f"),
    ])
}

fn load(m: &HashMap<&'static str, &'static str>) -> Result<Config, ConfigError> {
    Config::from_lookup(|k| m.get(k).map(|v| v.to_string()))
}

#[test]
fn defaults() {
    let c = load(&base()).unwrap();
    assert_eq!(c.max_attempt(), 4);
    assert_eq!(c.layout.log_prefix, "logs/");
    assert_eq!(c.leases.claim_lease, Duration::from_secs(900));
    assert!(c.layout.track_items);
    assert_eq!(c.retry_policy.max_processing_attempts, 4);
    assert_eq!(c.retry_policy.max_download_attempts, 3);
    assert_eq!(c.importer.active_slots, ActiveSlots::All);
    let slot = c
        .importer
        .slot_pattern
        .captures("HLS.S30.T01GBH.2022226T214921.v2.0");
    assert_eq!(slot.and_then(|c| c.get(1)).map(|m| m.as_str()), Some("S30"));
    assert_eq!(c.layout.item_prefixes.history, "history/");
}

#[test]
fn clear_errors() {
    let mut m = base();
    m.remove("GRANARY_BUCKET");
    let e = load(&m).unwrap_err().to_string();
    assert!(e.contains("GRANARY_BUCKET is not set"), "{e}");
    let mut m = base();
    m.insert("GRANARY_MAX_RETRIES", "many");
    assert!(load(&m)
        .unwrap_err()
        .to_string()
        .contains("GRANARY_MAX_RETRIES=\"many\""));
    let mut m = base();
    m.insert("GRANARY_ID_PATTERN", "(?P<platform>x)");
    assert!(matches!(load(&m), Err(ConfigError::IdParser(_))));
    let mut m = base();
    m.insert("GRANARY_ITEM_RECORDS", "maybe");
    assert!(load(&m).unwrap_err().to_string().contains("use on or off"));
    // A SubmitJob rate past what Batch takes, or not a rate: named, with the limit.
    for bad in ["60", "0", "fast"] {
        let mut m = base();
        m.insert("GRANARY_SUBMIT_JOB_RATE", bad);
        let e = load(&m).unwrap_err().to_string();
        assert!(
            e.contains("GRANARY_SUBMIT_JOB_RATE") && e.contains("50"),
            "{e}"
        );
    }
    let mut m = base();
    m.insert("GRANARY_SUBMIT_JOB_RATE", "0.5");
    let spacing = load(&m).unwrap().jobs.unwrap().submit_spacing;
    assert_eq!(spacing, Some(std::time::Duration::from_secs(2)));
    let mut m = base();
    m.insert("GRANARY_NOT_BEFORE", "yesterday");
    assert!(load(&m).unwrap_err().to_string().contains("RFC 3339"));
}

#[test]
fn leases_must_outlast_the_function_that_holds_them() {
    let mut m = base();
    m.insert("GRANARY_FUNCTION_TIMEOUT_SECS", "300");
    m.insert("GRANARY_CLAIM_LEASE_SECS", "900");
    m.insert("GRANARY_ROUTE_LEASE_SECS", "301");
    assert_eq!(
        load(&m).unwrap().leases.function_timeout,
        Some(Duration::from_secs(300))
    );
    m.insert("GRANARY_ROUTE_LEASE_SECS", "300");
    let e = load(&m).unwrap_err().to_string();
    assert!(
        e.contains("GRANARY_ROUTE_LEASE_SECS") && e.contains("outlast"),
        "{e}"
    );
    m.insert("GRANARY_ROUTE_LEASE_SECS", "900");
    m.insert("GRANARY_CLAIM_LEASE_SECS", "0");
    assert!(load(&m)
        .unwrap_err()
        .to_string()
        .contains("GRANARY_CLAIM_LEASE_SECS"));
    // Without a function timeout (tests, the CLI) any lease is taken as given.
    m.remove("GRANARY_FUNCTION_TIMEOUT_SECS");
    assert!(load(&m).is_ok());
}

#[test]
fn a_function_reads_only_its_sections() {
    // The monitor never submits: it starts without a job queue or definition.
    let mut m = base();
    m.remove("GRANARY_JOB_QUEUE");
    m.remove("GRANARY_JOB_DEFINITION");
    m.insert(
        "GRANARY_MAX_ACTIVE_JOBS",
        "not a number, and not the monitor's business",
    );
    let c = Config::for_sections(Function::JobMonitor.sections(), |k| {
        m.get(k).map(|v| v.to_string())
    })
    .unwrap();
    assert!(c.jobs.is_none());
    assert_eq!(
        c.queues.as_ref().map(|q| q.retry_queue_url.as_str()),
        Some("r")
    );
    // The feeder does submit: the same environment is refused, naming the variable.
    let e = Config::for_sections(Function::QueueFeeder.sections(), |k| {
        m.get(k).map(|v| v.to_string())
    })
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("GRANARY_MAX_ACTIVE_JOBS") || e.contains("GRANARY_JOB_QUEUE"),
        "{e}"
    );
    // A report reads the layout alone.
    let only_bucket = Config::for_sections(&[], |k| (k == "GRANARY_BUCKET").then(|| "b".into()));
    assert!(only_bucket.is_ok());
}

#[test]
fn sections_not_read_keep_the_defaults_the_variables_have() {
    let read = load(&base()).unwrap();
    let unread = Config::for_sections(&[], |k| base().get(k).map(|v| v.to_string())).unwrap();
    assert_eq!(read.feeder, unread.feeder);
    assert_eq!(read.leases, unread.leases);
    assert_eq!(read.retry_policy, unread.retry_policy);
    assert_eq!(
        read.importer.slot_pattern.as_str(),
        unread.importer.slot_pattern.as_str()
    );
    assert_eq!(
        read.importer.eligible_pattern.as_str(),
        unread.importer.eligible_pattern.as_str()
    );
    assert_eq!(read.importer.raw_prefix, unread.importer.raw_prefix);
}

#[test]
fn max_retries_is_the_one_knob_for_processing_attempts() {
    let mut m = base();
    m.insert("GRANARY_MAX_RETRIES", "5");
    let c = load(&m).unwrap();
    assert_eq!(c.max_attempt(), 6);
    assert_eq!(c.retry_policy.max_processing_attempts, 6);
}

#[test]
fn spot_ends_share_the_budget_unless_given_their_own() {
    use crate::domain::attempt_budget::AttemptBudget;
    let mut m = base();
    m.insert("GRANARY_MAX_RETRIES", "2");
    let shared = AttemptBudget {
        retries: 2,
        spot_retries: None,
    };
    assert_eq!(load(&m).unwrap().attempt_budget, shared);
    m.insert("GRANARY_MAX_SPOT_RETRIES", "shared");
    assert_eq!(load(&m).unwrap().attempt_budget, shared);
    m.insert("GRANARY_MAX_SPOT_RETRIES", "5");
    let apart = load(&m).unwrap().attempt_budget;
    assert_eq!(apart.spot_retries, Some(5));
    m.insert("GRANARY_MAX_SPOT_RETRIES", "lots");
    let e = load(&m).unwrap_err().to_string();
    assert!(e.contains("GRANARY_MAX_SPOT_RETRIES"), "{e}");
    // The last-attempt queue: unset or empty is none, and ListJobs then asks one queue.
    m.remove("GRANARY_MAX_SPOT_RETRIES");
    m.insert("GRANARY_LAST_ATTEMPT_JOB_QUEUE", "");
    let jobs = load(&m).unwrap().jobs.unwrap();
    assert!(jobs.last_attempt_queue.is_none() && jobs.other_queues().is_empty());
    m.insert("GRANARY_LAST_ATTEMPT_JOB_QUEUE", "on-demand");
    let jobs = load(&m).unwrap().jobs.unwrap();
    assert_eq!(jobs.other_queues(), ["on-demand"]);
}
