//! `granary-bench lambdas`: the Lambda binaries themselves, cold and warm, on the local runtime.

use super::*;

pub(crate) async fn lambdas(events: usize, bin_dir: &std::path::Path) -> Result<()> {
    let (clients, stack) = bench_stack("l").await?;
    let rows = upload_feeder_inventory(&clients, &stack, events).await?;
    let feeder_events: Vec<String> = (0..events)
        .map(|_| r#"{"granule_submit_count": 1}"#.to_owned())
        .collect();
    let (monitor_events, requeuer_events) = monitor_and_requeuer_events(&stack, &rows)?;

    let mut table = lambdas_table();
    let env = lambda_env(&stack);
    for (name, evs) in [
        ("queue-feeder", feeder_events),
        ("job-monitor", monitor_events),
        ("requeuer", requeuer_events),
    ] {
        table.add_row(measure_lambda(bin_dir, &env, name, evs).await?);
    }
    // The importer: files to discover under sources/, then each binary in turn.
    upload_sources(&clients, &stack, events).await?;
    // Discovery lists all files each run: a few runs, the first registering every file.
    let discover_events = vec!["{}".to_owned(); 3];
    table.add_row(measure_lambda(bin_dir, &env, "importer-discover", discover_events).await?);
    let step_events = drain_import_queue(&clients, &stack).await?;
    table.add_row(measure_lambda(bin_dir, &env, "importer-step", step_events).await?);
    let sweeps = vec!["{}".to_owned(); events];
    table.add_row(measure_lambda(bin_dir, &env, "item-sweeper", sweeps).await?);
    println!(
        "Lambda binaries against a local Runtime API (init = process start to first poll)\n{table}"
    );
    Ok(())
}

/// The inventory the feeder takes one granule per invocation from, uploaded; its rows.
async fn upload_feeder_inventory(
    clients: &AwsClients,
    stack: &granary_local::stack::EmulatorStack,
    events: usize,
) -> Result<Vec<granary::adapters::parquet::InventoryRow>> {
    let rows: Vec<granary::adapters::parquet::InventoryRow> =
        granary_local::campaign::sample_granules(events, 1);
    let bytes = granary::adapters::parquet::write_inventory(&rows, &InventoryLayout::granary())?;
    S3Store::new(clients.s3.clone(), &stack.bucket)
        .put("inventories/0001.parquet", bytes, PutCondition::Overwrite)
        .await?;
    Ok(rows)
}

/// An SQS event of one message with `body`, as Lambda hands it to a function.
fn one_message_event(body: String) -> Result<String> {
    use granary::ports::ReceivedMessage;
    use granary_local::runner::lambda_sqs_event;

    let m = ReceivedMessage {
        message_id: "m0".into(),
        receipt_handle: "r0".into(),
        body,
        attributes: Default::default(),
        receive_count: 1,
        sent_at_ms: None,
    };
    Ok(serde_json::to_string(&lambda_sqs_event(
        "arn:aws:sqs:us-east-1:000000000000:bench",
        &[m],
    )?)?)
}

/// For each row, job-monitor's event (one job in ten failed) and requeuer's retry message.
fn monitor_and_requeuer_events(
    stack: &granary_local::stack::EmulatorStack,
    rows: &[granary::adapters::parquet::InventoryRow],
) -> Result<(Vec<String>, Vec<String>)> {
    use granary::domain::granule::{GranuleId, GranuleProcessingEvent};
    use granary_local::events::{state_change_event, AttemptEnd};

    let mut monitor_events = Vec::new();
    let mut requeuer_events = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        let facts = bench_facts(stack, &format!("lambda-bench-{i}"), row.granule_id.clone());
        let ends = if i % 10 == 0 {
            vec![AttemptEnd::AppFailure { exit_code: 1 }]
        } else {
            vec![AttemptEnd::Success]
        };
        let status = if i % 10 == 0 { "FAILED" } else { "SUCCEEDED" };
        monitor_events.push(one_message_event(
            state_change_event(&facts, &ends, status).to_string(),
        )?);
        let retry = GranuleProcessingEvent {
            granule_id: GranuleId::parse(&format!("lambda-bench-granule-{i}"))?,
            attempt: 1,
        };
        requeuer_events.push(one_message_event(serde_json::to_string(&retry)?)?);
    }
    Ok((monitor_events, requeuer_events))
}

/// The Lambda binaries table, one row a function.
fn lambdas_table() -> Table {
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED).set_header([
        "function",
        "init ms",
        "events",
        "errors",
        "events/s",
        "RSS MiB after",
        "peak RSS MiB",
    ]);
    table
}

/// The functions' environment: the stack's, and where the importer finds its sources.
fn lambda_env(stack: &granary_local::stack::EmulatorStack) -> Vec<(String, String)> {
    stack
        .env
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .chain([(
            "GRANARY_SOURCE_URL".to_owned(),
            format!("s3://{}/sources/", stack.bucket),
        )])
        .collect()
}

/// `events` source files under sources/ for the importer to discover.
async fn upload_sources(
    clients: &AwsClients,
    stack: &granary_local::stack::EmulatorStack,
    events: usize,
) -> Result<()> {
    let store = S3Store::new(clients.s3.clone(), &stack.bucket);
    for i in 0..events {
        store
            .put(
                &format!("sources/HLS.S30.T{i:05}.2024001T000000.v2.0.h5"),
                bytes::Bytes::from(vec![b'x'; 4096]),
                PutCondition::Overwrite,
            )
            .await?;
    }
    Ok(())
}

/// The import queue's messages discovery left, each once, as importer-step's events.
async fn drain_import_queue(
    clients: &AwsClients,
    stack: &granary_local::stack::EmulatorStack,
) -> Result<Vec<String>> {
    let import_queue =
        granary::adapters::aws::SqsQueue::new(clients.sqs.clone(), &stack.import_queue_url);
    let mut step_events = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    loop {
        let got = import_queue.receive(10, 60, 0).await?;
        if got.is_empty() {
            break;
        }
        for m in got {
            import_queue.delete(&m.receipt_handle).await?;
            if seen.insert(m.body.clone()) {
                step_events.push(one_message_event(m.body)?);
            }
        }
    }
    Ok(step_events)
}

pub(crate) fn add_row(
    table: &mut Table,
    name: &str,
    item_records: &str,
    batch: usize,
    times: &[f64],
    before: (u64, u64, u64),
    after: (u64, u64, u64),
) {
    let mut sorted = times.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    let median = sorted[sorted.len() / 2];
    let records = (batch * times.len()) as f64;
    table.add_row([
        name.to_owned(),
        item_records.to_owned(),
        batch.to_string(),
        times.len().to_string(),
        format!("{:.0}", batch as f64 / median),
        format!("{:.1}", median * 1000.0),
        format!("{:.2}", (after.0 - before.0) as f64 / records),
        format!("{:.2}", (after.1 - before.1) as f64 / records),
        format!("{:.2}", (after.2 - before.2) as f64 / records),
    ]);
}
