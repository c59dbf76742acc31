//! granary's benchmarks: figures printed, never asserted. See BENCHMARKS.md.
//!
//!   granary-bench window [--rows 1000000 --rows 10000000] [--reps 5] [--n 1000]
//!
//! The feeder's window read: inventories shaped like HLS inventories, written the way pyarrow
//! writes by default and the way granary writes them, uploaded to the emulator's S3; then N rows
//! are read at the start, middle and end, each measurement in a fresh child process so its peak
//! RSS is its own. Requests and bytes are counted at granary's object-store port.
#![cfg_attr(test, allow(clippy::too_many_lines))]

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

mod audit;
mod campaign;
mod common;

// The campaign bench runs every Lambda of a campaign, the Batch twin and the store twin in one
// process, millions of small JSON documents made and dropped: glibc's allocator spent a quarter
// of its CPU in malloc and free (perf, 100,000 granules). mimalloc is what a long-lived,
// allocation-heavy Rust process uses instead; the Lambdas themselves live a few calls each.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
mod handlers;
mod lambdas;
mod window;

use campaign::*;
use common::*;
use handlers::*;
use lambdas::*;
use window::*;

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
    /// `granary audit`'s sort, judge and lists over a made-up campaign of N granules.
    Audit {
        #[arg(long, default_value_t = 10_000_000)]
        granules: u64,
        /// The sort's memory in MiB (default: the command's).
        #[arg(long)]
        sort_memory_mib: Option<usize>,
    },
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
        /// Submit each window of first attempts as one array job (GRANARY_ARRAY_WINDOWS).
        #[arg(long)]
        array_windows: bool,
        /// Park retries and submit them as windows of retries (GRANARY_ARRAY_RETRIES): with
        /// --array-windows, one array job a window of retries.
        #[arg(long)]
        array_retries: bool,
        /// Keep item records (GRANARY_ITEM_RECORDS): on or off (default: the environment's
        /// GRANARY_ITEM_RECORDS, else on).
        #[arg(long, value_parser = ["on", "off"])]
        item_records: Option<String>,
        /// The in-memory Batch refuses SubmitJob past this many calls a second, as Batch does
        /// past the account's 50 (0: no limit). In-memory runs only.
        #[arg(long, default_value_t = 50)]
        submit_limit: usize,
        /// SubmitJob calls a second each submitter paces itself to (GRANARY_SUBMIT_JOB_RATE;
        /// 0: unpaced).
        #[arg(long, default_value_t = 40.0)]
        submit_rate: f64,
        /// Run the invocations one after another on one thread, in the tests' order (default:
        /// side by side on the runtime's worker threads, one per core, as Lambda runs them).
        #[arg(long)]
        serial: bool,
        /// GRANARY_RECONCILE_AFTER_SECS for the campaign: how old a window's marker is before the
        /// reconciler looks at it. The bench runs hours of AWS time in minutes, so the hour
        /// granary defaults to would leave every window to one pass after the campaign; the
        /// default here is past the monitor's backlog, so a pass finds the ends handled.
        #[arg(long, default_value_t = 120)]
        reconcile_after_secs: u64,
        /// The Batch simulator's faults: `default` (Spot reclaims, 2% failing granules, pull
        /// errors, duplicated and reordered events) or `none` (every granule's first attempt
        /// succeeds, each event delivered once): the floor of granary's own requests.
        #[arg(long, value_parser = ["default", "none"], default_value = "default")]
        faults: String,
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

#[tokio::main]
async fn main() -> Result<()> {
    match Cli::parse().command {
        Command::Audit {
            granules,
            sort_memory_mib,
        } => audit::audit(granules, sort_memory_mib).await,
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
            array_windows,
            array_retries,
            item_records,
            submit_limit,
            submit_rate,
            serial,
            reconcile_after_secs,
            faults,
        } => {
            campaign(
                granules,
                CampaignOptions {
                    in_memory,
                    json,
                    feeder_interval_ms,
                    granule_submit_count,
                    array_windows,
                    array_retries,
                    item_records: item_records.map(|v| v == "on"),
                    submit_limit,
                    submit_rate,
                    parallel: !serial,
                    reconcile_after_secs,
                    faultless: faults == "none",
                },
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
