//! `granary-bench handlers`: the handlers' calls and time per batch, against the emulator.

use super::*;

/// Counts as (S3 PUTs, S3 requests, SQS requests).
pub(crate) fn snapshot(c: &RequestCounts) -> (u64, u64, u64) {
    (
        c.s3_put.load(Ordering::Relaxed),
        c.s3_total(),
        c.sqs_total(),
    )
}

pub(crate) async fn handlers(batches: Vec<usize>, invocations: usize) -> Result<()> {
    use granary::handlers::Ctx;

    let (clients, stack) = bench_stack("h").await?;
    let counts = Arc::new(RequestCounts::default());
    let mut table = handlers_table();
    let mut serial = 0usize;
    for records_on in [false, true] {
        let mut config = stack.config()?;
        config.layout.track_items = records_on;
        // Setup (item records as the feeder would have left them) is not counted.
        let setup = Ctx::aws(config, &clients)?;
        let ctx = setup.tapped(counts.clone());
        for &batch in &batches {
            let records = invocations * batch;
            let monitor_bodies =
                monitor_bodies(&setup, &stack, records, records_on, &mut serial).await?;
            let requeuer_bodies = requeuer_bodies(&setup, records, records_on, &mut serial).await?;
            for (name, queue_url, bodies) in [
                ("job-monitor", &stack.events_queue_url, monitor_bodies),
                ("requeuer", &stack.retry_queue_url, requeuer_bodies),
            ] {
                let before = snapshot(&counts);
                let times = time_handler(&ctx, name, queue_url, &bodies, batch).await?;
                let records = if records_on { "on" } else { "off" };
                add_row(
                    &mut table,
                    name,
                    records,
                    batch,
                    &times,
                    before,
                    snapshot(&counts),
                );
            }
        }
    }
    println!("Handlers against the emulator (requests counted at granary's ports)\n{table}");
    Ok(())
}

/// The handlers table, one row a handler, item-records setting and batch size.
fn handlers_table() -> Table {
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED).set_header([
        "handler",
        "item records",
        "batch",
        "invocations",
        "records/s per invocation",
        "median ms",
        "S3 PUT/record",
        "S3 req/record",
        "SQS req/record",
    ]);
    table
}

/// `records` Batch state-change events for job-monitor: 90% successes, 5% Spot past Batch's
/// retries, 5% application failures (with item records, each job submitted first).
async fn monitor_bodies(
    setup: &granary::handlers::Ctx,
    stack: &granary_local::stack::EmulatorStack,
    records: usize,
    records_on: bool,
    serial: &mut usize,
) -> Result<Vec<String>> {
    use granary::domain::granule::{GranuleId, GranuleProcessingEvent};
    use granary_local::events::{state_change_event, AttemptEnd};

    let spot = AttemptEnd::SpotInterruption {
        instance: "i-0123456789abcdef0".into(),
    };
    let mut monitor_bodies = Vec::new();
    for _ in 0..records {
        *serial += 1;
        let serial = *serial;
        let granule = format!(
            "HLS.S30.T{:02}ABC.2022{:03}T{:06}.v2.0",
            serial % 60,
            1 + serial % 365,
            serial % 1_000_000
        );
        let job = format!("bench-job-{serial}");
        if records_on {
            let event = GranuleProcessingEvent::first(GranuleId::parse(&granule)?);
            granary::handlers::item_sync::submitted(setup, &event, &job, None, "bench").await?;
        }
        let facts = bench_facts(stack, &job, granule);
        let (ends, status) = match serial % 20 {
            0 => (vec![spot.clone(), spot.clone()], "FAILED"),
            1 => (vec![AttemptEnd::AppFailure { exit_code: 1 }], "FAILED"),
            _ => (vec![AttemptEnd::Success], "SUCCEEDED"),
        };
        monitor_bodies.push(state_change_event(&facts, &ends, status).to_string());
    }
    Ok(monitor_bodies)
}

/// `records` retry messages for requeuer: attempt 1 → attempt 2 submitted to Batch (with item
/// records, each attempt 1 submitted and failed first).
async fn requeuer_bodies(
    setup: &granary::handlers::Ctx,
    records: usize,
    records_on: bool,
    serial: &mut usize,
) -> Result<Vec<String>> {
    use granary::domain::granule::{GranuleId, GranuleProcessingEvent};

    let mut requeuer_bodies = Vec::new();
    for _ in 0..records {
        *serial += 1;
        let serial = *serial;
        let e = GranuleProcessingEvent {
            granule_id: GranuleId::parse(&format!("bench-granule-{serial}"))?,
            attempt: 1,
        };
        if records_on {
            let job = format!("bench-failed-{serial}");
            granary::handlers::item_sync::submitted(setup, &e, &job, None, "bench").await?;
            let end = granary::handlers::item_sync::End {
                job_id: &job,
                ends: &[granary::domain::lifecycle::ItemState::ProcessingFailed],
                reason: "Spot",
                listed_in: None,
                repeated: false,
            };
            granary::handlers::item_sync::finished(setup, &e, end, "bench").await?;
        }
        requeuer_bodies.push(serde_json::to_string(&e)?);
    }
    Ok(requeuer_bodies)
}

/// Hands `bodies` to the handler `name` in SQS batches of `batch`; the seconds each batch took.
async fn time_handler(
    ctx: &granary::handlers::Ctx,
    name: &str,
    queue_url: &str,
    bodies: &[String],
    batch: usize,
) -> Result<Vec<f64>> {
    use granary::handlers::{monitor, requeuer};
    use granary::ports::ReceivedMessage;
    use granary_local::runner::lambda_sqs_event;

    let message = |i: usize, body: String| ReceivedMessage {
        message_id: format!("m{i}"),
        receipt_handle: format!("r{i}"),
        body,
        attributes: Default::default(),
        receive_count: 1,
        sent_at_ms: None,
    };
    let mut times = Vec::new();
    for chunk in bodies.chunks(batch) {
        let records: Vec<ReceivedMessage> = chunk
            .iter()
            .enumerate()
            .map(|(i, b)| message(i, b.clone()))
            .collect();
        let event = lambda_sqs_event(queue_url, &records)?;
        let t = Instant::now();
        let response = if name == "job-monitor" {
            monitor::handle_sqs(ctx, event).await
        } else {
            requeuer::handle_sqs(ctx, event).await
        };
        times.push(t.elapsed().as_secs_f64());
        anyhow::ensure!(
            response.batch_item_failures.is_empty(),
            "{name} reported failures"
        );
    }
    Ok(times)
}

/// Runs one Lambda binary against a local Runtime API until it has handled `evs`; returns its
/// table row (init ms, events, errors, events/s, RSS after, peak RSS).
pub(crate) async fn measure_lambda(
    bin_dir: &std::path::Path,
    env: &[(String, String)],
    name: &str,
    evs: Vec<String>,
) -> Result<Vec<String>> {
    use granary_local::runtime_api::RuntimeApi;
    let bin = bin_dir.join(name);
    anyhow::ensure!(
        bin.exists(),
        "{} not found: build it with `cargo build --release -p {name}`",
        bin.display()
    );
    let n = evs.len() as u64;
    let api = RuntimeApi::start(evs).await?;
    let started = Instant::now();
    let mut child = tokio::process::Command::new(&bin)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("AWS_LAMBDA_RUNTIME_API", &api.addr)
        .env("AWS_LAMBDA_FUNCTION_NAME", name)
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env("AWS_LAMBDA_LOG_STREAM_NAME", "bench")
        .env("AWS_LAMBDA_LOG_GROUP_NAME", format!("/aws/lambda/{name}"))
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let pid = child.id().context("no pid")?;
    let deadline = Instant::now() + std::time::Duration::from_secs(900);
    let init = loop {
        if let Some(t) = api.lock().first_poll {
            break t.duration_since(started);
        }
        anyhow::ensure!(
            api.lock().init_errors.is_empty(),
            "{name} failed to start: {:?}",
            api.lock().init_errors
        );
        anyhow::ensure!(
            Instant::now() < deadline,
            "{name} never polled for an event"
        );
        tokio::time::sleep(std::time::Duration::from_micros(200)).await;
    };
    let serving = Instant::now();
    loop {
        let (done, errors) = {
            let st = api.lock();
            (st.responses + st.errors, st.errors)
        };
        if done >= n {
            if errors > 0 {
                eprintln!(
                    "{name}: last error: {}",
                    api.lock().last_error.clone().unwrap_or_default()
                );
            }
            let secs = serving.elapsed().as_secs_f64();
            let row = vec![
                name.to_owned(),
                format!("{:.1}", init.as_secs_f64() * 1000.0),
                n.to_string(),
                errors.to_string(),
                format!("{:.0}", n as f64 / secs),
                format!("{:.1}", proc_status_kib(pid, "VmRSS:") as f64 / 1024.0),
                format!("{:.1}", proc_status_kib(pid, "VmHWM:") as f64 / 1024.0),
            ];
            child.kill().await.ok();
            return Ok(row);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{name} did not finish {n} events"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}
