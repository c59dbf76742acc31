//! The local runtime ends an invocation at its function's timeout as Lambda does: the timeouts
//! it uses are the template's (`Timeout:`). A simulation runs the deployed schedules and queues:
//! those are the template's defaults too.

use granary_local::runner::FunctionTimeouts;
use granary_template::Template;
use std::time::Duration;

fn template_timeout(template: &Template, logical_id: &str) -> Duration {
    let (_, function) = template
        .resources_of_type("AWS::Serverless::Function")
        .find(|(id, _)| id.as_str() == logical_id)
        .unwrap_or_else(|| panic!("no function {logical_id} in the template"));
    let seconds = function["Properties"]["Timeout"]
        .as_u64()
        .unwrap_or_else(|| panic!("{logical_id} sets no Timeout"));
    Duration::from_secs(seconds)
}

#[test]
fn the_runtimes_function_timeouts_are_the_templates() {
    let template = Template::granary().unwrap();
    let t = FunctionTimeouts::default();
    for (id, ours) in [
        ("QueueFeederFunction", t.feeder),
        ("JobMonitorFunction", t.monitor),
        ("RequeuerFunction", t.requeuer),
        ("ItemSweeperFunction", t.sweeper),
        ("ImporterDiscoverFunction", t.importer_discover),
        ("ImporterStepFunction", t.importer_step),
    ] {
        assert_eq!(ours, template_timeout(&template, id), "{id}");
    }
}

fn parameter_default(template: &Template, name: &str) -> u64 {
    let doc = &template.doc;
    doc["Parameters"][name]["Default"]
        .as_u64()
        .or_else(|| doc["Parameters"][name]["Default"].as_str()?.parse().ok())
        .unwrap_or_else(|| panic!("parameter {name} has no numeric default"))
}

#[test]
fn a_simulation_runs_the_templates_schedules_and_visibility_timeouts() {
    use granary_local::simulate::{
        FEEDER_EVERY, GRANULE_SUBMIT_COUNT, SWEEPER_EVERY, VISIBILITY_TIMEOUT_SECS,
    };
    let template = Template::granary().unwrap();
    assert_eq!(
        FEEDER_EVERY.as_secs(),
        60 * parameter_default(&template, "FeederScheduleMinutes")
    );
    assert_eq!(
        GRANULE_SUBMIT_COUNT,
        parameter_default(&template, "GranuleSubmitCount")
    );
    let (_, sweeper) = template
        .resources_of_type("AWS::Serverless::Function")
        .find(|(id, _)| id.as_str() == "ItemSweeperFunction")
        .unwrap();
    let rates: Vec<&str> = sweeper["Properties"]["Events"]
        .as_object()
        .unwrap()
        .values()
        .filter_map(|e| e["Properties"]["Schedule"].as_str())
        .collect();
    assert_eq!(
        rates,
        [format!("rate({} minutes)", SWEEPER_EVERY.as_secs() / 60)]
    );
    for queue in ["RetryQueue", "BatchEventsQueue"] {
        let (_, q) = template
            .resources_of_type("AWS::SQS::Queue")
            .find(|(id, _)| id.as_str() == queue)
            .unwrap();
        assert_eq!(
            q["Properties"]["VisibilityTimeout"].as_u64(),
            Some(u64::from(VISIBILITY_TIMEOUT_SECS)),
            "{queue}"
        );
    }
}

/// The ingest and archive simulations' schedules, timeouts and the task queue's visibility
/// timeout are the template's.
#[test]
fn the_ingest_and_archive_simulations_run_the_templates_timings() {
    use granary_local::simulate::{archive, ingest};
    let template = Template::granary().unwrap();
    let schedule = |id: &str| -> Vec<String> {
        let (_, f) = template
            .resources_of_type("AWS::Serverless::Function")
            .find(|(fid, _)| fid.as_str() == id)
            .unwrap();
        f["Properties"]["Events"]
            .as_object()
            .unwrap()
            .values()
            .filter_map(|e| e["Properties"]["Schedule"].as_str().map(str::to_owned))
            .collect()
    };
    assert_eq!(ingest::TICK_EVERY, Duration::from_secs(60));
    assert_eq!(schedule("IngestDispatcherFunction"), ["rate(1 minute)"]);
    assert_eq!(schedule("ArchiveDispatcherFunction"), ["rate(1 minute)"]);
    assert_eq!(archive::TICK_EVERY, Duration::from_secs(60));
    for (id, ours) in [
        ("IngestDispatcherFunction", ingest::DISPATCHER_TIMEOUT),
        ("JobMonitorFunction", ingest::MONITOR_TIMEOUT),
        ("ArchiveDispatcherFunction", archive::DISPATCHER_TIMEOUT),
        ("ArchiveTaskFunction", archive::TASK_TIMEOUT),
    ] {
        assert_eq!(ours, template_timeout(&template, id), "{id}");
    }
    let (_, q) = template
        .resources_of_type("AWS::SQS::Queue")
        .find(|(id, _)| id.as_str() == "ArchiveTaskQueue")
        .unwrap();
    assert_eq!(
        q["Properties"]["VisibilityTimeout"].as_u64(),
        Some(u64::from(archive::TASK_VISIBILITY_SECS))
    );
}

/// The backfill simulation's importer runs the template's discovery schedule and the import
/// queue's event source as the template sets them.
#[test]
fn a_simulations_importer_runs_the_templates_schedule_and_queue() {
    use granary_local::campaign::IMPORT_QUEUE_MAX_RECEIVES;
    use granary_local::runner::{IMPORT_BATCH_SIZE, IMPORT_VISIBILITY_TIMEOUT_SECS};
    use granary_local::simulate::DISCOVER_EVERY;
    let template = Template::granary().unwrap();
    let function = |id: &str| {
        template
            .resources_of_type("AWS::Serverless::Function")
            .find(|(fid, _)| fid.as_str() == id)
            .unwrap()
            .1
            .clone()
    };
    let events = |id: &str, field: &str| -> Vec<serde_json::Value> {
        function(id)["Properties"]["Events"]
            .as_object()
            .unwrap()
            .values()
            .map(|e| e["Properties"][field].clone())
            .filter(|v| !v.is_null())
            .collect()
    };
    let every = format!("rate({} minutes)", DISCOVER_EVERY.as_secs() / 60);
    assert_eq!(
        events("ImporterDiscoverFunction", "Schedule"),
        [every.as_str()]
    );
    assert_eq!(
        events("ImporterStepFunction", "BatchSize"),
        [u64::from(IMPORT_BATCH_SIZE)]
    );
    let (_, queue) = template
        .resources_of_type("AWS::SQS::Queue")
        .find(|(id, _)| id.as_str() == "ImportQueue")
        .unwrap();
    assert_eq!(
        queue["Properties"]["VisibilityTimeout"].as_u64(),
        Some(u64::from(IMPORT_VISIBILITY_TIMEOUT_SECS))
    );
    assert_eq!(
        queue["Properties"]["RedrivePolicy"]["maxReceiveCount"].as_u64(),
        Some(u64::from(IMPORT_QUEUE_MAX_RECEIVES))
    );
}
