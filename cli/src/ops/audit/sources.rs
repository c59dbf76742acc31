//! The three tables read into fact lines, a page at a time: the inventories (row by row, the
//! id column alone), the logs (`LogPages`), the products (a listing under each
//! `GRANARY_PRODUCT_KEYS` template) and the attempts held open (the claims).

use super::sort::LineSorter;
use anyhow::{Context, Result};
use granary::domain::audit::{FactLine, LogSeen, ProductTemplate, Seen};
use granary::handlers::Ctx;
use granary::repositories::logs::LogPages;
use std::collections::BTreeMap;

/// Inventory rows read at once (the id column's pages alone are fetched).
const ROWS_AT_ONCE: u64 = 65_536;

/// What was read, for the summary.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Read {
    pub inventories: u64,
    pub rows: u64,
    /// Rows whose id cell names no granule (the feeder files them as rejects).
    pub invalid_rows: u64,
    pub logs: u64,
    /// Objects under the log prefix that are not granary logs.
    pub foreign_logs: u64,
    pub products: u64,
    /// Objects under a product prefix no template maps to a granule.
    pub foreign_products: u64,
    pub held_attempts: u64,
}

/// Every inventory under the prefix and every one the tracker names; a row is fed once the
/// feeder has passed it (the tracker's `rows_submitted`).
pub async fn inventories(
    ctx: &Ctx,
    sorter: &mut LineSorter,
    read: &mut Read,
    progress: &dyn Fn(&str),
) -> Result<()> {
    let tracker = ctx
        .tracker()
        .load()
        .await
        .context("reading the tracker")?
        .value;
    let mut fed: BTreeMap<String, u64> = tracker
        .inventories
        .iter()
        .map(|i| (i.key.clone(), i.rows_submitted))
        .collect();
    let prefix = &ctx.config.layout.inventory_prefix;
    for meta in ctx
        .store
        .list(prefix)
        .await
        .context("listing the inventories")?
    {
        if meta.key.ends_with(".parquet") {
            fed.entry(meta.key).or_insert(0);
        }
    }
    let column = &ctx.config.feeder.inventory_id_column;
    for (key, fed_rows) in fed {
        let inventory = ctx
            .inventories()
            .open(&key, column)
            .await
            .with_context(|| format!("inventory {key}"))?;
        read.inventories += 1;
        let total = inventory.num_rows();
        let mut start = 0;
        while start < total {
            let n = ROWS_AT_ONCE.min(total - start);
            let cells = inventory
                .read_ids(start, n)
                .await
                .with_context(|| format!("inventory {key}: rows {}..{}", start + 1, start + n))?;
            for (i, cell) in cells.iter().enumerate() {
                let row = start + i as u64;
                match cell.granule() {
                    Ok(id) => sorter.push(
                        FactLine::new(
                            id.to_string(),
                            Seen::Row {
                                fed: row < fed_rows,
                            },
                        )
                        .encode(),
                    )?,
                    Err(_) => read.invalid_rows += 1,
                }
            }
            read.rows += n;
            start += n;
            progress(&format!("{key}: {start} of {total} rows"));
        }
    }
    Ok(())
}

pub async fn logs(
    ctx: &Ctx,
    sorter: &mut LineSorter,
    read: &mut Read,
    progress: &dyn Fn(&str),
) -> Result<()> {
    let prefix = &ctx.config.layout.log_prefix;
    let mut pages = LogPages::new(ctx.store.as_ref(), prefix);
    while let Some(page) = pages.next_page().await.context("reading the logs")? {
        for (key, record) in page {
            let seen = Seen::Log(LogSeen::of(&record));
            sorter.push(FactLine::new(key.granule_id.to_string(), seen).encode())?;
            read.logs += 1;
        }
        progress(&format!("{} logs", read.logs));
    }
    read.foreign_logs = pages.foreign;
    Ok(())
}

pub async fn products(
    ctx: &Ctx,
    templates: &[ProductTemplate],
    sorter: &mut LineSorter,
    read: &mut Read,
    progress: &dyn Fn(&str),
) -> Result<()> {
    for (i, template) in templates.iter().enumerate() {
        let mut after = String::new();
        loop {
            let page = ctx
                .store
                .list_page(&template.prefix, &after)
                .await
                .with_context(|| format!("listing the products under {}", template.prefix))?;
            for meta in &page.objects {
                let Some(granule) = template.granule_of(&meta.key) else {
                    read.foreign_products += 1;
                    continue;
                };
                let seen = Seen::Product {
                    template: i,
                    key: meta.key.clone(),
                    bytes: meta.size,
                };
                sorter.push(FactLine::new(granule, seen).encode())?;
                read.products += 1;
            }
            match page.objects.last() {
                Some(last) if page.truncated => after = last.key.clone(),
                _ => break,
            }
            progress(&format!("{} products", read.products));
        }
    }
    Ok(())
}

pub async fn held(ctx: &Ctx, sorter: &mut LineSorter, read: &mut Read) -> Result<()> {
    let held = granary::handlers::cancel::held_attempts(ctx)
        .await
        .context("reading the open claims")?;
    for attempt in held {
        let seen = Seen::InFlight {
            attempt: attempt.attempt,
        };
        sorter.push(FactLine::new(attempt.granule_id.to_string(), seen).encode())?;
        read.held_attempts += 1;
    }
    let listed = granary::handlers::cancel::cancelled(ctx)
        .await
        .context("reading the cancelled list")?;
    for entry in listed {
        let seen = Seen::CancelListed {
            attempt: entry.attempt,
        };
        sorter.push(FactLine::new(entry.granule_id.to_string(), seen).encode())?;
        read.held_attempts += 1;
    }
    Ok(())
}
