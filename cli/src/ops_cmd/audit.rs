//! `granary audit`: what is missing, orphaned, doubled or dead-lettered, as lists to rerun.

use anyhow::Result;
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use granary::config::Section;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::operator::ctx;
use granary_cli::ops::audit;

#[derive(clap::Args)]
pub struct AuditArgs {
    /// The directory the lists go to (`missing.csv`, `missing.parquet`, … and `summary.json`).
    #[arg(long, default_value = "granary-audit")]
    out: PathBuf,
    /// Memory the sort may use before it spills to the temporary directory, in MiB.
    #[arg(long, default_value_t = audit::SORT_MEMORY >> 20)]
    sort_memory_mib: usize,
    /// The summary as JSON.
    #[arg(long)]
    json: bool,
}

pub async fn audit(args: AuditArgs) -> Result<ExitCode> {
    let ctx = ctx(&[Section::Feeder, Section::Retry, Section::Importer]).await?;
    let bar = indicatif::ProgressBar::new_spinner();
    let summary = audit::audit(&ctx, &args.out, args.sort_memory_mib << 20, &|what| {
        bar.set_message(what.to_owned());
        bar.tick();
    })
    .await?;
    bar.finish_and_clear();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
        return Ok(ExitCode::SUCCESS);
    }
    let r = &summary.read;
    println!(
        "read {} inventories ({} rows, {} without a usable id), {} logs, {} products, {} held attempts",
        r.inventories, r.rows, r.invalid_rows, r.logs, r.products, r.held_attempts
    );
    let j = &summary.judged;
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED)
        .set_header(["granules", "count"]);
    for (standing, n) in &j.standings {
        t.add_row([standing.replace('_', " "), n.to_string()]);
    }
    println!("{t}");
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED)
        .set_header(["list", "rows", "file"]);
    for list in granary::domain::audit::AuditList::ALL {
        let rows = j.lists.get(list.name()).copied().unwrap_or(0);
        let file = summary.out.join(format!("{}.csv", list.name()));
        t.add_row([
            list.name().replace('_', " "),
            rows.to_string(),
            file.display().to_string(),
        ]);
    }
    println!("{t}");
    for (reason, n) in &j.dead_letters {
        println!("dead-lettered {n}: {reason}");
    }
    let at = |name: &str| {
        summary
            .out
            .join(format!("{name}.csv"))
            .display()
            .to_string()
    };
    let rows = |name: &str| j.lists.get(name).copied().unwrap_or(0);
    if rows("missing") > 0 {
        println!(
            "rerun: granary resume --from-list {} --dry-run",
            at("missing")
        );
    }
    if rows("product_missing") > 0 {
        // A success is not rerun; re-validation revokes it and sends the granule round.
        println!(
            "products: granary revalidate the ids in {}",
            at("product_missing")
        );
    }
    if j.lists.get("dead_letters").copied().unwrap_or(0) > 0 {
        println!(
            "redrive: granary redrive --from-list {} --dry-run",
            at("dead_letters")
        );
    }
    Ok(ExitCode::SUCCESS)
}
