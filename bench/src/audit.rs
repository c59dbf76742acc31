//! `granary audit`'s join at campaign scale: the facts of N granules — an inventory row each,
//! their logs, their products, the few attempts held open — pushed through the audit's own
//! external sort and judge (`granary_cli::ops::audit`), the lists written to a temporary
//! directory. Time and the process's peak resident set are printed. Reading the facts from S3
//! is not in these figures: it is one GET a log (see BENCHMARKS.md).

use anyhow::Result;
use granary::domain::attempt_budget::{AttemptBudget, Ends};
use granary::domain::audit::{FactLine, LogSeen, ProductTemplate, Rules, Seen};
use granary::domain::classify::Route;
use granary_cli::ops::audit::{judge_sorted, lists::ListWriters, sort::LineSorter, SORT_MEMORY};
use std::time::Instant;

/// The shape of the made-up campaign, per 10,000 granules.
const RETRIED: u64 = 300;
const DEAD: u64 = 100;
const LOST: u64 = 50;
const NO_PRODUCT: u64 = 10;
const EMPTY_PRODUCT: u64 = 5;
const ORPHANS: u64 = 5;
const DOUBLED: u64 = 2;
const HELD: u64 = 20;

fn id(i: u64) -> String {
    format!(
        "HLS.S30.T{:02}{}.{}{:03}T{:06}.v2.0",
        i % 60 + 1,
        ["QBC", "KDF", "LMN"][(i % 3) as usize],
        2020 + (i / 3_000_000),
        i % 365 + 1,
        i % 1_000_000
    )
}

fn log(attempt: u32, success: bool, superseded: bool, route: Route, reason: &str) -> Seen {
    Seen::Log(LogSeen {
        attempt,
        success_side: success || superseded,
        superseded,
        revoked: false,
        route,
        ends: Ends {
            attempt,
            spot_ends: u32::from(!success),
        },
        reason: reason.to_owned(),
        out_of_memory: false,
        memory_mib: None,
    })
}

/// Every fact of granule `i`, as the audit's readers would push them.
fn facts(i: u64, out: &mut Vec<FactLine>) {
    let g = id(i);
    let k = i % 10_000;
    let product = |bytes| Seen::Product {
        template: 0,
        key: format!("products/{g}.tif"),
        bytes,
    };
    out.push(FactLine::new(g.clone(), Seen::Row { fed: true }));
    if k < LOST {
        return;
    }
    if k < LOST + DEAD {
        out.push(FactLine::new(
            g,
            log(
                1,
                false,
                false,
                Route::FailureDlq,
                "application exited with code 1",
            ),
        ));
        return;
    }
    if k < LOST + DEAD + HELD {
        out.push(FactLine::new(
            g.clone(),
            log(1, false, false, Route::RetryQueue, "host EC2 terminated"),
        ));
        out.push(FactLine::new(g, Seen::InFlight { attempt: 2 }));
        return;
    }
    if k < LOST + DEAD + HELD + RETRIED {
        out.push(FactLine::new(
            g.clone(),
            log(1, false, true, Route::RetryQueue, "host EC2 terminated"),
        ));
        out.push(FactLine::new(
            g.clone(),
            log(2, true, false, Route::Done, ""),
        ));
    } else {
        out.push(FactLine::new(
            g.clone(),
            log(1, true, false, Route::Done, ""),
        ));
    }
    let j = k - (LOST + DEAD + HELD);
    if j < DOUBLED {
        out.push(FactLine::new(
            g.clone(),
            log(3, true, false, Route::Done, ""),
        ));
    }
    if j >= NO_PRODUCT + DOUBLED {
        let bytes = if j < NO_PRODUCT + DOUBLED + EMPTY_PRODUCT {
            0
        } else {
            42_000_000
        };
        out.push(FactLine::new(g.clone(), product(bytes)));
    }
    if j < ORPHANS {
        let orphan = format!("HLS.L30.T{:02}ORF.{}.v2.0", i % 60, i);
        out.push(FactLine::new(
            orphan.clone(),
            Seen::Product {
                template: 0,
                key: format!("products/{orphan}.tif"),
                bytes: 1,
            },
        ));
    }
}

pub async fn audit(granules: u64, sort_memory_mib: Option<usize>) -> Result<()> {
    let rules = Rules {
        budget: AttemptBudget {
            retries: 3,
            spot_retries: None,
        },
        memory: granary::domain::memory::MemoryLimits::parse("2048:16384")?,
        products: vec![ProductTemplate::parse("products/{id}.tif")?],
    };
    let budget = sort_memory_mib.map_or(SORT_MEMORY, |m| m << 20);
    let started = Instant::now();
    let mut sorter = LineSorter::new(budget);
    let mut batch = Vec::new();
    for i in 0..granules {
        facts(i, &mut batch);
        for f in batch.drain(..) {
            sorter.push(f.encode())?;
        }
    }
    let lines = sorter.lines;
    let runs = sorter.runs();
    let pushed = started.elapsed();
    let dir = std::env::temp_dir().join(format!("granary-bench-audit-{}", std::process::id()));
    let mut writers = ListWriters::create(&dir)?;
    let judged = judge_sorted(sorter.finish()?, &rules, &mut writers)?;
    writers.finish()?;
    let total = started.elapsed();
    let disk: u64 = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum();
    std::fs::remove_dir_all(&dir)?;
    println!(
        "audit join: {granules} granules, {lines} fact lines, sort budget {} MiB, {runs} runs",
        budget >> 20
    );
    println!(
        "  read and sorted {:.1} s; merged, judged and written {:.1} s; in all {:.1} s",
        pushed.as_secs_f64(),
        (total - pushed).as_secs_f64(),
        total.as_secs_f64()
    );
    println!(
        "  peak RSS {:.0} MiB; lists {:.1} MiB on disk",
        crate::window::peak_rss_kib() as f64 / 1024.0,
        disk as f64 / (1 << 20) as f64
    );
    println!("  standings {:?}", judged.standings);
    println!("  lists {:?}", judged.lists);
    Ok(())
}
