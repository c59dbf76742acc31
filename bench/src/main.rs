//! granary's benchmarks: figures printed, never asserted. See BENCHMARKS.md.
//!
//!   granary-bench window [--rows 1000000 --rows 10000000] [--reps 5] [--n 1000]
//!
//! The feeder's window read: inventories shaped like HLS inventories, written the way pyarrow
//! writes by default and the way granary writes them, uploaded to the emulator's S3; then N rows
//! are read at the start, middle and end, each measurement in a fresh child process so its peak
//! RSS is its own. Requests and bytes are counted at granary's object-store port.

use anyhow::{Context, Result};
use arrow::array::{RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use clap::{Parser, Subcommand};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use granary::adapters::aws::{load_sdk_config, AwsClients, S3Store};
use granary::adapters::parquet::{
    pyarrow_default_properties, Inventory, InventoryLayout, DEFAULT_ID_COLUMN,
};
use granary::adapters::tap::counting::RequestCounts;
use granary::adapters::tap::TappedStore;
use granary::ports::{ObjectStore, PutCondition, Queue};
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;
use serde::{Deserialize, Serialize};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(
    name = "granary-bench",
    about = "granary benchmarks (figures, not assertions)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Feeder window read over two inventory layouts.
    Window {
        /// Inventory sizes in rows.
        #[arg(long = "rows", default_values_t = [1_000_000u64, 10_000_000])]
        rows: Vec<u64>,
        /// Repetitions per window (the median is reported).
        #[arg(long, default_value_t = 5)]
        reps: usize,
        /// Window size in rows.
        #[arg(long, default_value_t = 1000)]
        n: u64,
        /// Also measure these Parquet files as they are (e.g. written by pyarrow itself), named
        /// by their file name.
        #[arg(long = "file")]
        files: Vec<std::path::PathBuf>,
    },
    /// A whole campaign in the local runtime: granules/s, requests per granule, and the
    /// orchestration cost per million granules at public AWS prices.
    Campaign {
        #[arg(long = "granules", default_values_t = [10_000usize])]
        granules: Vec<usize>,
        /// Run on the in-memory twins of every port instead of the emulator: granary's own
        /// cost, with no emulator in the loop (request counts are the same).
        #[arg(long)]
        in_memory: bool,
        /// Print one JSON object per campaign (one line each) instead of the table.
        #[arg(long)]
        json: bool,
        /// The feeder schedule's period in milliseconds; 0 fires it as fast as the handlers
        /// take it (the local runtime's loop; no AWS schedule runs more than once a minute).
        #[arg(long, default_value_t = 200)]
        feeder_interval_ms: u64,
        /// Granules per feeder run (the schedule's granule_submit_count).
        #[arg(long, default_value_t = 200)]
        granule_submit_count: u64,
    },
    /// job-monitor and requeuer: records per second per invocation, requests per record.
    Handlers {
        /// SQS batch sizes to measure.
        #[arg(long = "batch", default_values_t = [10usize, 100])]
        batches: Vec<usize>,
        /// Invocations per batch size.
        #[arg(long, default_value_t = 20)]
        invocations: usize,
    },
    /// Every Lambda binary against a local Runtime API: init time and RSS after N events.
    Lambdas {
        #[arg(long, default_value_t = 1000)]
        events: usize,
        /// Where the function binaries are (build them with --release first).
        #[arg(long, default_value = "target/release")]
        bin_dir: std::path::PathBuf,
    },
    /// (internal) One measurement, in its own process: prints a JSON line.
    WindowRead {
        #[arg(long)]
        bucket: String,
        #[arg(long)]
        key: String,
        #[arg(long)]
        start: u64,
        #[arg(long)]
        n: u64,
        #[arg(long)]
        reps: usize,
        /// Open the file once beforehand (not counted) and keep its page map, as the feeder does
        /// between runs: the figures are those of a window after the first open.
        #[arg(long)]
        page_map: bool,
    },
}

#[derive(Debug, Serialize, Deserialize)]
struct WindowFigures {
    /// The page map's size as the tracker keeps it (base64), when one was kept.
    #[serde(default)]
    page_map_bytes: u64,
    median_ms: f64,
    requests: u64,
    bytes: u64,
    peak_rss_kib: u64,
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// HLS-like rows, newest first: granule_id, start_datetime, status, published.
fn write_inventory(rows: u64, props: WriterProperties) -> Result<Vec<u8>> {
    let schema = Arc::new(Schema::new(vec![
        Field::new(DEFAULT_ID_COLUMN, DataType::Utf8, false),
        Field::new("start_datetime", DataType::Utf8, false),
        Field::new("status", DataType::Utf8, false),
        Field::new("published", DataType::Utf8, false),
    ]));
    let mut out = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut out, schema.clone(), Some(props))?;
    let start = chrono::NaiveDate::from_ymd_opt(2025, 2, 8)
        .and_then(|d| d.and_hms_opt(23, 59, 59))
        .context("date")?;
    let chunk = 262_144u64;
    let mut i = 0u64;
    while i < rows {
        let end = (i + chunk).min(rows);
        let (mut ids, mut starts, mut statuses, mut published) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for r in i..end {
            // ~20 granules per minute over the archive, newest first; tiles and platforms vary.
            let t = start - chrono::Duration::seconds((r * 3) as i64);
            let platform = if r % 5 < 3 { "S30" } else { "L30" };
            let zone = 1 + (r * 7919) % 60;
            let letters: String = [(r * 31) % 26, (r * 17) % 26, (r * 13) % 26]
                .iter()
                .map(|x| char::from(b'A' + *x as u8))
                .collect();
            ids.push(format!(
                "HLS.{platform}.T{zone:02}{letters}.{}.v2.0",
                t.format("%Y%jT%H%M%S")
            ));
            starts.push(t.format("%Y-%m-%dT%H:%M:%SZ").to_string());
            statuses.push(if r % 97 == 0 { "reprocess" } else { "ok" });
            published.push(
                (t + chrono::Duration::days(2))
                    .format("%Y-%m-%d")
                    .to_string(),
            );
        }
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from(ids)),
                Arc::new(StringArray::from(starts)),
                Arc::new(StringArray::from(statuses)),
                Arc::new(StringArray::from(published)),
            ],
        )?;
        writer.write(&batch)?;
        i = end;
    }
    writer.close()?;
    Ok(out)
}

async fn window_read(
    bucket: &str,
    key: &str,
    start: u64,
    n: u64,
    reps: usize,
    page_map: bool,
) -> Result<WindowFigures> {
    let clients = AwsClients::new(&load_sdk_config().await);
    let s3: Arc<dyn ObjectStore> = Arc::new(S3Store::new(clients.s3.clone(), bucket));
    let mut times = Vec::new();
    let mut last = (0, 0);
    let mut map_bytes = 0;
    for _ in 0..reps.max(1) {
        let counts = Arc::new(RequestCounts::default());
        let store: Arc<dyn ObjectStore> = Arc::new(TappedStore {
            inner: s3.clone(),
            tap: counts.clone(),
        });
        let map = if page_map {
            Inventory::open(s3.clone(), key, DEFAULT_ID_COLUMN)
                .await?
                .page_map(start, n + 128 * 1024)?
        } else {
            None
        };
        map_bytes = map.as_ref().map_or(0, |m| m.metadata.len() as u64);
        let t = Instant::now();
        // A feeder run opens the inventory afresh each time: footer included in the cost,
        // unless it kept a page map from an earlier run.
        let inv = match &map {
            Some(map) => Inventory::from_page_map(store, key, DEFAULT_ID_COLUMN, map)?,
            None => Inventory::open(store, key, DEFAULT_ID_COLUMN).await?,
        };
        let ids = inv.read_ids(start, n).await?;
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        anyhow::ensure!(
            ids.len() as u64 == n.min(inv.num_rows() - start),
            "short window"
        );
        last = (
            counts.s3_get.load(Ordering::Relaxed),
            counts.s3_bytes_read.load(Ordering::Relaxed),
        );
    }
    times.sort_by(|a, b| a.total_cmp(b));
    Ok(WindowFigures {
        page_map_bytes: map_bytes,
        median_ms: times[times.len() / 2],
        requests: last.0,
        bytes: last.1,
        peak_rss_kib: peak_rss_kib(),
    })
}

async fn window(rows: Vec<u64>, reps: usize, n: u64, files: Vec<std::path::PathBuf>) -> Result<()> {
    let clients = AwsClients::new(&load_sdk_config().await);
    let bucket = format!("granary-bench-{}", std::process::id());
    clients
        .s3
        .create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .context("creating the bench bucket (is AWS_ENDPOINT_URL set? use `make bench`)")?;
    let s3 = S3Store::new(clients.s3.clone(), &bucket);
    let me = std::env::current_exe()?;
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED).set_header([
        "layout",
        "rows",
        "file MB",
        "row groups",
        "window at",
        "median ms",
        "GETs",
        "bytes fetched",
        "peak RSS MiB",
        "page map bytes",
    ]);
    // (label, key, file MB, whether the feeder keeps a page map for it)
    let mut inputs: Vec<(String, String, f64, bool)> = Vec::new();
    for &size in &rows {
        for (layout, props) in [
            ("pyarrow default", pyarrow_default_properties()),
            ("granary", InventoryLayout::granary().properties()),
        ] {
            let t = Instant::now();
            let bytes = write_inventory(size, props)?;
            let file_mb = bytes.len() as f64 / 1e6;
            let key = format!("inventories/{}-{size}.parquet", layout.replace(' ', "-"));
            s3.put(&key, bytes.into(), PutCondition::Overwrite).await?;
            eprintln!(
                "wrote {key}: {file_mb:.1} MB in {:.1} s",
                t.elapsed().as_secs_f64()
            );
            inputs.push((layout.to_owned(), key.clone(), file_mb, false));
            if layout == "granary" {
                inputs.push(("granary, page map kept".to_owned(), key, file_mb, true));
            }
        }
    }
    for path in &files {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "file".to_owned());
        let key = format!("inventories/given-{name}");
        let file_mb = bytes.len() as f64 / 1e6;
        s3.put(&key, bytes.into(), PutCondition::Overwrite).await?;
        inputs.push((name.clone(), key.clone(), file_mb, false));
        inputs.push((format!("{name}, page map kept"), key, file_mb, true));
    }
    for (layout, key, file_mb, page_map) in inputs {
        let inv = Inventory::open(Arc::new(s3.clone()), &key, DEFAULT_ID_COLUMN).await?;
        let (groups, size) = (inv.num_row_groups(), inv.num_rows());
        if page_map && inv.page_map(0, 1)?.is_none() {
            // No offset index: nothing to keep; the window costs what a first open does.
            continue;
        }
        for (label, start) in [
            ("start", 0),
            ("middle", size / 2),
            ("end", size.saturating_sub(n)),
        ] {
            let mut cmd = std::process::Command::new(&me);
            cmd.args(["window-read", "--bucket", &bucket, "--key", &key])
                .args([
                    "--start",
                    &start.to_string(),
                    "--n",
                    &n.to_string(),
                    "--reps",
                    &reps.to_string(),
                ]);
            if page_map {
                cmd.arg("--page-map");
            }
            let out = cmd.output()?;
            anyhow::ensure!(
                out.status.success(),
                "window-read failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let f: WindowFigures = serde_json::from_slice(&out.stdout)?;
            table.add_row([
                layout.clone(),
                size.to_string(),
                format!("{file_mb:.1}"),
                groups.to_string(),
                label.to_owned(),
                format!("{:.1}", f.median_ms),
                f.requests.to_string(),
                f.bytes.to_string(),
                format!("{:.1}", f.peak_rss_kib as f64 / 1024.0),
                f.page_map_bytes.to_string(),
            ]);
        }
    }
    println!("Feeder window read: {n} rows, median of {reps}, each in a fresh process\n{table}");
    Ok(())
}

/// Counts as (S3 PUTs, S3 requests, SQS requests).
fn snapshot(c: &RequestCounts) -> (u64, u64, u64) {
    (
        c.s3_put.load(Ordering::Relaxed),
        c.s3_total(),
        c.sqs_total(),
    )
}

async fn handlers(batches: Vec<usize>, invocations: usize) -> Result<()> {
    use granary::domain::granule::{GranuleId, GranuleProcessingEvent};
    use granary::handlers::{monitor, requeuer, Ctx};
    use granary::ports::ReceivedMessage;
    use granary_local::events::{state_change_event, AttemptEnd};
    use granary_local::runner::lambda_sqs_event;

    let (clients, stack) = bench_stack("h").await?;
    let counts = Arc::new(RequestCounts::default());
    let message = |i: usize, body: String| ReceivedMessage {
        message_id: format!("m{i}"),
        receipt_handle: format!("r{i}"),
        body,
        attributes: Default::default(),
        receive_count: 1,
        sent_at_ms: None,
    };
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
    let mut serial = 0usize;
    for records_on in [false, true] {
        let mut config = stack.config()?;
        config.layout.track_items = records_on;
        // Setup (item records as the feeder would have left them) is not counted.
        let setup = Ctx::aws(config, &clients);
        let ctx = setup.counted(&counts);
        for &batch in &batches {
            // job-monitor: 90% successes, 5% Spot past Batch's retries, 5% application failures.
            let spot = AttemptEnd::SpotInterruption {
                instance: "i-0123456789abcdef0".into(),
            };
            let mut monitor_bodies = Vec::new();
            for _ in 0..invocations * batch {
                serial += 1;
                let granule = format!(
                    "HLS.S30.T{:02}ABC.2022{:03}T{:06}.v2.0",
                    serial % 60,
                    1 + serial % 365,
                    serial % 1_000_000
                );
                let job = format!("bench-job-{serial}");
                if records_on {
                    let event = GranuleProcessingEvent::first(GranuleId::parse(&granule)?);
                    granary::handlers::item_sync::submitted(&setup, &event, &job, None, "bench")
                        .await?;
                }
                let facts = bench_facts(&stack, &job, granule);
                let (ends, status) = match serial % 20 {
                    0 => (vec![spot.clone(), spot.clone()], "FAILED"),
                    1 => (vec![AttemptEnd::AppFailure { exit_code: 1 }], "FAILED"),
                    _ => (vec![AttemptEnd::Success], "SUCCEEDED"),
                };
                monitor_bodies.push(state_change_event(&facts, &ends, status).to_string());
            }
            // requeuer: retry messages for attempt 1 → attempt 2 submitted to Batch.
            let mut requeuer_bodies = Vec::new();
            for _ in 0..invocations * batch {
                serial += 1;
                let e = GranuleProcessingEvent {
                    granule_id: GranuleId::parse(&format!("bench-granule-{serial}"))?,
                    attempt: 1,
                };
                if records_on {
                    let job = format!("bench-failed-{serial}");
                    granary::handlers::item_sync::submitted(&setup, &e, &job, None, "bench")
                        .await?;
                    granary::handlers::item_sync::finished(
                        &setup,
                        &e,
                        &job,
                        granary::domain::lifecycle::ItemState::ProcessingFailed,
                        "Spot",
                        "bench",
                    )
                    .await?;
                }
                requeuer_bodies.push(serde_json::to_string(&e)?);
            }
            for (name, queue_url, bodies) in [
                ("job-monitor", &stack.events_queue_url, monitor_bodies),
                ("requeuer", &stack.retry_queue_url, requeuer_bodies),
            ] {
                let before = snapshot(&counts);
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
                        monitor::handle_sqs(&ctx, event).await
                    } else {
                        requeuer::handle_sqs(&ctx, event).await
                    };
                    times.push(t.elapsed().as_secs_f64());
                    anyhow::ensure!(
                        response.batch_item_failures.is_empty(),
                        "{name} reported failures"
                    );
                }
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

/// Runs one Lambda binary against a local Runtime API until it has handled `evs`; returns its
/// table row (init ms, events, errors, events/s, RSS after, peak RSS).
async fn measure_lambda(
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

/// Public prices (us-east-1, Nov 2026 list prices, no free tier) the estimate uses.
mod prices {
    pub const LAMBDA_REQUEST: f64 = 0.20 / 1e6;
    /// arm64, per GB-second.
    pub const LAMBDA_GB_SECOND: f64 = 0.000_013_333_4;
    pub const LAMBDA_MEMORY_GB: f64 = 0.25;
    /// PUT, COPY, POST, LIST per request.
    pub const S3_PUT: f64 = 0.005 / 1e3;
    pub const S3_GET: f64 = 0.0004 / 1e3;
    pub const SQS_REQUEST: f64 = 0.40 / 1e6;
}

/// One campaign's figures, as `granary-bench campaign --json` prints them (per granule unless
/// the name says otherwise).
#[derive(Debug, Serialize)]
struct CampaignFigures {
    granules: usize,
    ports: &'static str,
    item_records: bool,
    feeder_interval_ms: u64,
    granule_submit_count: u64,
    wall_secs: f64,
    granules_per_sec: f64,
    cpu_secs: f64,
    /// The campaign's accounting, from its logs and the failure DLQ: "did anything get lost".
    succeeded: u64,
    dead_lettered: u64,
    /// Neither succeeded nor dead-lettered: lost work. The bench fails when it is not 0.
    unaccounted: u64,
    s3_get_per_granule: f64,
    s3_put_per_granule: f64,
    s3_list_per_granule: f64,
    s3_copy_per_granule: f64,
    s3_delete_per_granule: f64,
    s3_requests_per_granule: f64,
    sqs_requests_per_granule: f64,
    batch_calls_per_granule: f64,
    lambda_invocations_per_granule: f64,
    lambda_gb_s_per_granule: f64,
    cost_per_million_usd: f64,
    /// The bench process's peak resident set (VmHWM) so far: campaigns run one after another in
    /// one process, so a later campaign's figure is at least an earlier one's.
    peak_rss_mib: f64,
}

async fn campaign(
    sizes: Vec<usize>,
    in_memory: bool,
    json: bool,
    feeder_interval_ms: u64,
    granule_submit_count: u64,
) -> Result<()> {
    use granary_local::campaign::{Campaign, CampaignSpec};
    let config = load_sdk_config().await;
    let clients = AwsClients::new(&config);
    let iam = aws_sdk_iam::Client::new(&config);
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED).set_header([
        "granules",
        "ports",
        "item records",
        "wall s",
        "granules/s",
        "S3 GET",
        "S3 PUT+LIST",
        "S3 DELETE",
        "SQS",
        "Batch",
        "Lambda invocations",
        "Lambda GB-s",
        "$ per million granules",
    ]);
    for n in sizes {
        let mut spec = CampaignSpec {
            granules: n,
            ..CampaignSpec::default()
        };
        spec.runner.feeder_interval = Duration::from_millis(feeder_interval_ms);
        spec.runner.granule_submit_count = granule_submit_count;
        // The emulator settles ~25 granules/s: allow a large campaign the time it needs.
        spec.runner.deadline = spec.runner.deadline.max(Duration::from_secs(n as u64 / 5));
        let mut c = if in_memory {
            Campaign::in_memory(&spec).await?
        } else {
            let name = format!("granary-bench-c{}-{n}", std::process::id());
            Campaign::setup(&clients, &iam, &name, &spec).await?
        };
        // The bench counts by logs and the DLQ; the simulator's per-job plan (for tests) would
        // cost a few hundred bytes a job.
        c.runtime.simulator.keep_plan = false;
        let cpu_before = process_cpu_secs();
        let before = snapshot_all(&c.counts);
        let started = Instant::now();
        let mut last_report = Instant::now();
        c.runtime
            .run_to_quiescence(|p| {
                // Long campaigns run for an hour: say how far along they are twice a minute.
                if last_report.elapsed() >= Duration::from_secs(30) {
                    last_report = Instant::now();
                    eprintln!(
                        "campaign of {n}: {:.0} s, {} jobs submitted, {} succeeded, {} retrying, {} dead-lettered",
                        started.elapsed().as_secs_f64(),
                        p.submitted,
                        p.succeeded,
                        p.retrying,
                        p.dead_lettered
                    );
                }
            })
            .await?;
        let wall = started.elapsed().as_secs_f64();
        let cpu = process_cpu_secs() - cpu_before;
        let after = snapshot_all(&c.counts);
        let d = |i: usize| (after[i] - before[i]) as f64 / n as f64;
        let (get, put, list, copy, delete, sqs) = (d(0), d(1), d(2), d(3), d(4), d(5));
        let p = &c.runtime.progress;
        let invocations =
            (p.feeder_runs + p.monitor_invocations + p.requeuer_invocations) as f64 / n as f64;
        // Lambda time ≈ the time the runner spent inside each handler (against the emulator).
        let handler_secs =
            (p.feeder_time + p.monitor_time + p.requeuer_time).as_secs_f64() / n as f64;
        let gb_s = handler_secs * prices::LAMBDA_MEMORY_GB;
        let batch = d(6);
        let per_granule = invocations * prices::LAMBDA_REQUEST
            + gb_s * prices::LAMBDA_GB_SECOND
            + (put + list + copy) * prices::S3_PUT
            + get * prices::S3_GET
            + sqs * prices::SQS_REQUEST;
        // After the counts are taken: the accounting's own LISTs are not the campaign's.
        let summary = c.summarize(Duration::from_secs_f64(wall)).await?;
        let figures = CampaignFigures {
            granules: n,
            ports: if in_memory { "in-memory" } else { "emulator" },
            item_records: c.runtime.ctx.config.layout.track_items,
            feeder_interval_ms,
            granule_submit_count,
            wall_secs: wall,
            granules_per_sec: n as f64 / wall,
            cpu_secs: cpu,
            succeeded: summary.succeeded,
            dead_lettered: summary.dead_lettered,
            unaccounted: summary.unaccounted,
            s3_get_per_granule: get,
            s3_put_per_granule: put,
            s3_list_per_granule: list,
            s3_copy_per_granule: copy,
            s3_delete_per_granule: delete,
            s3_requests_per_granule: get + put + list + copy + delete,
            sqs_requests_per_granule: sqs,
            batch_calls_per_granule: batch,
            lambda_invocations_per_granule: invocations,
            lambda_gb_s_per_granule: gb_s,
            cost_per_million_usd: per_granule * 1e6,
            peak_rss_mib: peak_rss_kib() as f64 / 1024.0,
        };
        if json {
            println!("{}", serde_json::to_string(&figures)?);
        }
        table.add_row([
            n.to_string(),
            if in_memory { "in-memory" } else { "emulator" }.to_owned(),
            if c.runtime.ctx.config.layout.track_items {
                "on"
            } else {
                "off"
            }
            .to_owned(),
            format!("{wall:.0}"),
            format!("{:.1}", n as f64 / wall),
            format!("{get:.2}"),
            format!("{:.2}", put + list + copy),
            format!("{delete:.2}"),
            format!("{sqs:.2}"),
            format!("{batch:.2}"),
            format!("{invocations:.3}"),
            format!("{gb_s:.4}"),
            format!("{:.2}", per_granule * 1e6),
        ]);
        eprintln!(
            "campaign of {n}: {wall:.1} s, {cpu:.1} s of granary-bench CPU ({:.2} ms per granule); feeder {:.1} s, Batch simulator {:.1} s, job-monitor {:.1} s, requeuer {:.1} s; {} jobs swept up at the end",
            cpu * 1000.0 / n as f64,
            p.feeder_time.as_secs_f64(),
            p.simulator_time.as_secs_f64(),
            p.monitor_time.as_secs_f64(),
            p.requeuer_time.as_secs_f64(),
            c.runtime.simulator.stats.swept
        );
        anyhow::ensure!(
            summary.unaccounted == 0,
            "campaign of {n}: {} granules neither succeeded nor dead-lettered",
            summary.unaccounted
        );
    }
    if json {
        return Ok(());
    }
    println!(
        "Campaign in the local runtime (requests counted at granary's ports, per granule)\n{table}"
    );
    println!("Prices: Lambda $0.20/M requests + $0.0000133334/GB-s (arm64, 256 MB); S3 $0.005/1k PUT/COPY/LIST, $0.0004/1k GET, DELETE free; SQS $0.40/M; Batch API and Batch events on the default bus cost nothing.");
    Ok(())
}

/// User + system CPU seconds this process has used (all threads), from /proc/self/stat.
fn process_cpu_secs() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the parenthesised command name; utime and stime are the 12th and 13th.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // Linux reports these in clock ticks of 1/100 s (USER_HZ) on every architecture we build for.
    (ticks(11) + ticks(12)) / 100.0
}

fn snapshot_all(c: &RequestCounts) -> [u64; 7] {
    [
        c.s3_get.load(Ordering::Relaxed),
        c.s3_put.load(Ordering::Relaxed),
        c.s3_list.load(Ordering::Relaxed),
        c.s3_other.load(Ordering::Relaxed),
        c.s3_delete.load(Ordering::Relaxed),
        c.sqs_total(),
        c.batch_calls.load(Ordering::Relaxed),
    ]
}

/// A fresh stack on the emulator for one benchmark.
async fn bench_stack(tag: &str) -> Result<(AwsClients, granary_local::stack::EmulatorStack)> {
    use granary_local::stack::{EmulatorStack, StackOptions};
    let config = load_sdk_config().await;
    let clients = AwsClients::new(&config);
    let iam = aws_sdk_iam::Client::new(&config);
    let stack = EmulatorStack::provision(
        &clients,
        &iam,
        &format!("granary-bench-{tag}{}", std::process::id()),
        StackOptions::default(),
    )
    .await
    .context("provisioning the bench stack (is AWS_ENDPOINT_URL set? use `make bench`)")?;
    Ok((clients, stack))
}

/// What Batch would report for a bench job on the stack's queue, attempt 1.
fn bench_facts(
    stack: &granary_local::stack::EmulatorStack,
    job: &str,
    granule_id: String,
) -> granary_local::events::JobFacts {
    granary_local::events::JobFacts {
        job_id: job.to_owned(),
        job_name: job.to_owned(),
        job_arn: format!("arn:aws:batch:us-east-1:000000000000:job/{job}"),
        job_queue_arn: stack.job_queue_arn.clone(),
        job_definition_arn: stack.job_definition.clone(),
        granule_id,
        attempt: 1,
        retry_strategy: granary_local::events::default_retry_strategy(2),
        created_at_ms: 1_700_000_000_000,
        account: "000000000000".into(),
        region: "us-east-1".into(),
    }
}

fn proc_status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

async fn lambdas(events: usize, bin_dir: &std::path::Path) -> Result<()> {
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

fn add_row(
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

#[tokio::main]
async fn main() -> Result<()> {
    match Cli::parse().command {
        Command::Window {
            rows,
            reps,
            n,
            files,
        } => window(rows, reps, n, files).await,
        Command::Handlers {
            batches,
            invocations,
        } => handlers(batches, invocations).await,
        Command::Lambdas { events, bin_dir } => lambdas(events, &bin_dir).await,
        Command::Campaign {
            granules,
            in_memory,
            json,
            feeder_interval_ms,
            granule_submit_count,
        } => {
            campaign(
                granules,
                in_memory,
                json,
                feeder_interval_ms,
                granule_submit_count,
            )
            .await
        }
        Command::WindowRead {
            bucket,
            key,
            start,
            n,
            reps,
            page_map,
        } => {
            let f = window_read(&bucket, &key, start, n, reps, page_map).await?;
            println!("{}", serde_json::to_string(&f)?);
            Ok(())
        }
    }
}
