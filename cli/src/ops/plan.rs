//! `granary plan`: what is left of the inventories and when it will finish, before launch and
//! while running. Each inventory's row count comes from its Parquet footer (the file's last bytes:
//! a ranged GET or two, never its rows); the tracker says how far the feeder got and how fast it
//! has moved; `granary::domain::plan` does the arithmetic.

use anyhow::{Context, Result};
use chrono::{DateTime, Duration, Utc};
use futures::{StreamExt, TryStreamExt};
use granary::adapters::parquet::Inventory;
use granary::domain::plan::{forecast, Forecast, PlanSettings};
use granary::domain::progress::rate;
use granary::handlers::Ctx;
use serde::Serialize;

/// Inventory footers read at once.
const FOOTERS_AT_ONCE: usize = 16;

/// What `granary plan` assumes when not told otherwise: the template's defaults, and granary's
/// own cost a million granules as measured (BENCHMARKS.md, "The cost floor", 2026-11-26).
pub mod defaults {
    pub const SCHEDULE_MINUTES: f64 = 60.0;
    pub const SUBMIT_COUNT: u64 = 1000;
    pub const FEEDER_TIMEOUT_SECS: f64 = 300.0;
    pub const JOB_MINUTES: f64 = 30.0;
    pub const RETRY_SHARE: f64 = 0.05;
    pub const SUBMIT_RATE: f64 = 20.0;
    pub const GRANARY_DOLLARS_PER_MILLION_RECORDS_ON: f64 = 18.41;
    pub const GRANARY_DOLLARS_PER_MILLION_RECORDS_OFF: f64 = 6.57;
}

/// What a forecast is asked to assume (`granary plan`'s options).
pub struct Assumed {
    pub schedule_minutes: f64,
    pub submit_count: u64,
    pub feeder_timeout_secs: f64,
    pub job_minutes: f64,
    pub retry_share: f64,
    /// First attempts as array windows, or one job each.
    pub array_windows: bool,
    pub submit_rate: f64,
    /// Default: the feeder's GRANARY_MAX_ACTIVE_JOBS.
    pub max_active_jobs: Option<u64>,
    pub job_hour_price: Option<f64>,
    /// Default: the measured figure for the stack's item records setting.
    pub granary_dollars_per_million: Option<f64>,
}

/// The template's defaults, first attempts as array windows or single jobs.
pub fn template_settings(ctx: &Ctx, array_windows: bool) -> PlanSettings {
    settings(
        ctx,
        &Assumed {
            schedule_minutes: defaults::SCHEDULE_MINUTES,
            submit_count: defaults::SUBMIT_COUNT,
            feeder_timeout_secs: defaults::FEEDER_TIMEOUT_SECS,
            job_minutes: defaults::JOB_MINUTES,
            retry_share: defaults::RETRY_SHARE,
            array_windows,
            submit_rate: defaults::SUBMIT_RATE,
            max_active_jobs: None,
            job_hour_price: None,
            granary_dollars_per_million: None,
        },
    )
}

/// The forecast's settings: what is assumed, with the stack's configuration where it is not.
pub fn settings(ctx: &Ctx, a: &Assumed) -> PlanSettings {
    let feeder = &ctx.config.feeder;
    let array_windows = a.array_windows;
    let run = std::time::Duration::from_secs_f64(a.feeder_timeout_secs);
    PlanSettings {
        schedule_minutes: a.schedule_minutes,
        submit_count: a.submit_count,
        run_secs: a.feeder_timeout_secs,
        window_rows: if array_windows {
            granary::handlers::feeder::ARRAY_WINDOW_ROWS
        } else {
            granary::handlers::feeder::window_ceiling(
                Some(run),
                Some(std::time::Duration::from_secs_f64(
                    1.0 / a.submit_rate.max(1e-3),
                )),
            )
        },
        max_active_jobs: a.max_active_jobs.unwrap_or(feeder.max_active_jobs),
        job_minutes: a.job_minutes,
        retry_share: a.retry_share,
        array_windows,
        submit_rate: a.submit_rate,
        job_hour_dollars: a.job_hour_price,
        granary_dollars_per_million: a.granary_dollars_per_million.unwrap_or(
            if ctx.config.layout.track_items {
                defaults::GRANARY_DOLLARS_PER_MILLION_RECORDS_ON
            } else {
                defaults::GRANARY_DOLLARS_PER_MILLION_RECORDS_OFF
            },
        ),
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct InventoryPlan {
    pub key: String,
    pub rows: u64,
    /// Rows the feeder has moved past (0 before launch).
    pub settled: u64,
    pub left: u64,
    /// Where the tracker disagrees with the footer (an inventory replaced under its key).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub at: DateTime<Utc>,
    pub campaign: Option<String>,
    pub inventories: Vec<InventoryPlan>,
    pub rows: u64,
    pub left: u64,
    pub settings: PlanSettings,
    pub forecast: Forecast,
}

/// The inventories `keys` name (every `.parquet` under the inventory prefix when none), their
/// footers read, against the tracker; the forecast under `settings`.
pub async fn gather(
    ctx: &Ctx,
    keys: &[String],
    settings: PlanSettings,
    now: DateTime<Utc>,
) -> Result<Plan> {
    let keys: Vec<String> = if keys.is_empty() {
        let prefix = &ctx.config.layout.inventory_prefix;
        let listed = ctx
            .store
            .list(prefix)
            .await
            .with_context(|| format!("listing the inventories under {prefix}"))?;
        let keys: Vec<String> = listed
            .into_iter()
            .map(|o| o.key)
            .filter(|k| k.ends_with(".parquet"))
            .collect();
        if keys.is_empty() {
            anyhow::bail!(
                "no inventories under {prefix} (the feeder reads the .parquet files there; \
                 `granary inventory convert` makes one)"
            );
        }
        keys
    } else {
        keys.to_vec()
    };
    let tracker = ctx
        .tracker()
        .load()
        .await
        .context("reading the tracker")?
        .value;
    // Footers read a few at a time, in the listing's order: a campaign of thousands of
    // inventories is thousands of small ranged GETs, each mostly waiting on S3.
    let footers: Vec<(String, u64)> = futures::stream::iter(keys)
        .map(|key| async move {
            let inventory = Inventory::open(
                ctx.store.clone(),
                &key,
                &ctx.config.feeder.inventory_id_column,
            )
            .await
            .with_context(|| format!("reading the footer of {key}"))?;
            anyhow::Ok((key, inventory.num_rows()))
        })
        .buffered(FOOTERS_AT_ONCE)
        .try_collect()
        .await?;
    let mut inventories = Vec::with_capacity(footers.len());
    for (key, rows) in footers {
        let tracked = tracker.inventories.iter().find(|i| i.key == key);
        let submitted = tracked.map_or(0, |i| i.rows_submitted);
        let note = match tracked.and_then(|i| i.total_rows) {
            Some(known) if known != rows => Some(format!(
                "the tracker knew {known} rows, the footer says {rows}: replaced under its key?"
            )),
            _ if submitted > rows => Some(format!(
                "the tracker is past the footer's {rows} rows (at {submitted})"
            )),
            _ => None,
        };
        let settled = submitted.min(rows);
        inventories.push(InventoryPlan {
            key,
            rows,
            settled,
            left: rows - settled,
            note,
        });
    }
    let rows = inventories.iter().map(|i| i.rows).sum();
    let left = inventories.iter().map(|i| i.left).sum();
    // The pace the campaign has kept over its last day, if it has moved.
    let measured = rate(&tracker.samples, now, Duration::hours(24)).map(|r| r.per_hour);
    Ok(Plan {
        at: now,
        campaign: ctx.campaign().map(|c| c.to_string()),
        inventories,
        rows,
        left,
        forecast: forecast(left, &settings, measured, now),
        settings,
    })
}
