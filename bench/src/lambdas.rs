//! `granary-bench lambdas`: the Lambda binaries themselves, cold and warm, on the local runtime.

use super::*;

pub(crate) async fn lambdas(events: usize, bin_dir: &std::path::Path) -> Result<()> {
    use granary::domain::granule::{GranuleId, GranuleProcessingEvent};
    use granary::ports::ReceivedMessage;
    use granary_local::events::{state_change_event, AttemptEnd};
    use granary_local::runner::lambda_sqs_event;

    let (clients, stack) = bench_stack("l").await?;
    // The feeder takes one granule per invocation from this inventory.
    let rows: Vec<granary::adapters::parquet::InventoryRow> =
        granary_local::campaign::sample_granules(events, 1);
    let bytes = granary::adapters::parquet::write_inventory(&rows, &InventoryLayout::granary())?;
    S3Store::new(clients.s3.clone(), &stack.bucket)
        .put("inventories/0001.parquet", bytes, PutCondition::Overwrite)
        .await?;

    let one = |body: String| -> Result<String> {
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
    };
    let feeder_events: Vec<String> = (0..events)
        .map(|_| r#"{"granule_submit_count": 1}"#.to_owned())
        .collect();
    let mut monitor_events = Vec::new();
    let mut requeuer_events = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        let facts = bench_facts(&stack, &format!("lambda-bench-{i}"), row.granule_id.clone());
        let ends = if i % 10 == 0 {
            vec![AttemptEnd::AppFailure { exit_code: 1 }]
        } else {
            vec![AttemptEnd::Success]
        };
        let status = if i % 10 == 0 { "FAILED" } else { "SUCCEEDED" };
        monitor_events.push(one(state_change_event(&facts, &ends, status).to_string())?);
        let retry = GranuleProcessingEvent {
            granule_id: GranuleId::parse(&format!("lambda-bench-granule-{i}"))?,
            attempt: 1,
        };
        requeuer_events.push(one(serde_json::to_string(&retry)?)?);
    }

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
    let env: Vec<(String, String)> = stack
        .env
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .chain([(
            "GRANARY_SOURCE_URL".to_owned(),
            format!("s3://{}/sources/", stack.bucket),
        )])
        .collect();
    for (name, evs) in [
        ("queue-feeder", feeder_events),
        ("job-monitor", monitor_events),
        ("requeuer", requeuer_events),
    ] {
        table.add_row(measure_lambda(bin_dir, &env, name, evs).await?);
    }
    // The importer: files to discover under sources/, then each binary in turn.
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
    // Discovery lists all files each run: a few runs, the first registering every file.
    let discover_events = vec!["{}".to_owned(); 3];
    table.add_row(measure_lambda(bin_dir, &env, "importer-discover", discover_events).await?);
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
                step_events.push(one(m.body)?);
            }
        }
    }
    table.add_row(measure_lambda(bin_dir, &env, "importer-step", step_events).await?);
    let sweeps = vec!["{}".to_owned(); events];
    table.add_row(measure_lambda(bin_dir, &env, "item-sweeper", sweeps).await?);
    println!(
        "Lambda binaries against a local Runtime API (init = process start to first poll)\n{table}"
    );
    Ok(())
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
