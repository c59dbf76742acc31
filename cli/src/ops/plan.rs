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
