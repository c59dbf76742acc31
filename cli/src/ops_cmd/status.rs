//! `granary status`: what is left and when it will finish, once or redrawn (`--watch`).

use anyhow::Result;
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use granary::config::Section;
use granary::handlers::Ctx;
use granary_cli::ops::status;
use std::process::ExitCode;

use crate::operator::ctx;

#[derive(clap::Args)]
pub struct StatusArgs {
    /// Print JSON instead of text.
    #[arg(long, conflicts_with = "watch")]
    json: bool,
    /// Redraw the status every --interval seconds, with the reasons of the newest failures,
    /// until Ctrl-C.
    #[arg(long)]
    watch: bool,
    /// Seconds between redraws of --watch.
    #[arg(long, default_value_t = 10, requires = "watch", value_parser = clap::value_parser!(u64).range(1..))]
    interval: u64,
    /// Stop --watch after this many redraws (for scripts; default: until Ctrl-C).
    #[arg(long, requires = "watch")]
    count: Option<u64>,
}

pub async fn status(args: StatusArgs) -> Result<ExitCode> {
    // The feeder's section too: its downstream queue is part of why it waits.
    let ctx = ctx(&[Section::Jobs, Section::Queues, Section::Feeder]).await?;
    let clients = granary::adapters::aws::AwsClients::from_env().await;
    let batch = granary::adapters::aws::batch::endpoint_has_batch(&clients.batch).await?;
    if args.watch {
        return watch_status(&ctx, batch, &args).await;
    }
    let s = status::gather(&ctx, chrono::Utc::now(), batch).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&s)?);
        return Ok(ExitCode::SUCCESS);
    }
    print_status(&s);
    Ok(ExitCode::SUCCESS)
}

/// `granary status --watch`: the status and the newest failures' reasons, redrawn in place
/// every `--interval` seconds until Ctrl-C (or `--count` redraws).
async fn watch_status(ctx: &Ctx, batch: bool, args: &StatusArgs) -> Result<ExitCode> {
    let mut seen = std::collections::HashMap::new();
    let mut drawn = 0u64;
    // One Ctrl-C for the whole watch: pressed while a redraw reads, it still stops the watch.
    let stop = tokio::signal::ctrl_c();
    tokio::pin!(stop);
    loop {
        let read = async {
            let s = status::gather(ctx, chrono::Utc::now(), batch).await?;
            let reasons = status::recent_failure_reasons(ctx, &mut seen).await?;
            anyhow::Ok((s, reasons))
        };
        let read = tokio::select! {
            read = read => read,
            _ = &mut stop => return Ok(ExitCode::SUCCESS),
        };
        // Clear the screen and go home (ANSI), then draw.
        print!("\x1b[2J\x1b[H");
        // A failed read (a throttled call, the network) is shown and the next redraw tries again.
        let (s, reasons) = match read {
            Ok(read) => read,
            Err(e) => {
                println!("granary status — could not read the status now: {e:#}");
                drawn += 1;
                if args.count.is_some_and(|n| drawn >= n) {
                    return Ok(ExitCode::FAILURE);
                }
                tokio::select! {
                    _ = tokio::time::sleep(std::time::Duration::from_secs(args.interval)) => {}
                    _ = &mut stop => return Ok(ExitCode::SUCCESS),
                }
                continue;
            }
        };
        println!(
            "granary status — {} (every {} s; Ctrl-C stops)",
            s.at.format("%Y-%m-%d %H:%M:%S UTC"),
            args.interval
        );
        print_status(&s);
        if reasons.is_empty() {
            println!("failing now: none");
        } else {
            let mut t = Table::new();
            t.load_preset(UTF8_FULL_CONDENSED).set_header([
                format!(
                    "failing now: reason (newest {} failure logs)",
                    status::RECENT_FAILURES
                ),
                "granules".to_owned(),
            ]);
            for r in reasons.iter().take(10) {
                t.add_row([r.reason.clone(), r.granules.to_string()]);
            }
            println!("{t}");
        }
        drawn += 1;
        if args.count.is_some_and(|n| drawn >= n) {
            return Ok(ExitCode::SUCCESS);
        }
        tokio::select! {
            _ = tokio::time::sleep(std::time::Duration::from_secs(args.interval)) => {}
            _ = &mut stop => return Ok(ExitCode::SUCCESS),
        }
    }
}

/// "; the least recently written marker 0h 04m ago", or nothing when no marker has a time.
fn least_recently_written(ends: &status::OpenEnds) -> String {
    ends.least_recently_written.map_or(String::new(), |at| {
        let secs = (chrono::Utc::now() - at).num_seconds().max(0);
        format!(
            "; the least recently written marker {}h {:02}m ago",
            secs / 3600,
            secs / 60 % 60
        )
    })
}

fn print_status(s: &status::Status) {
    print_inventories(s);
    print_active_jobs(s);
    print_queues_and_open_ends(s);
    print_feeder_and_pace(s);
}

/// The campaign, each inventory's progress and the rows submitted.
fn print_inventories(s: &status::Status) {
    if let Some(campaign) = &s.campaign {
        println!("campaign {campaign} (GRANARY_CAMPAIGN)");
    }
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED)
        .set_header(["inventory", "submitted", "total", "done"]);
    for i in &s.inventories {
        t.add_row([
            i.key.clone(),
            i.submitted.to_string(),
            i.total.map_or("not opened yet".into(), |n| n.to_string()),
            i.total.map_or("-".into(), |n| {
                format!("{:.1}%", 100.0 * i.submitted as f64 / n.max(1) as f64)
            }),
        ]);
    }
    println!("{t}");
    println!(
        "submitted {} of {} known rows ({} inventories not opened yet)",
        s.rows_submitted, s.rows_known, s.inventories_unopened
    );
}

/// The Batch jobs active by status, and how long the oldest runnable one has waited.
fn print_active_jobs(s: &status::Status) {
    match &s.active_jobs {
        None => {
            println!("active Batch jobs: unknown (AWS Batch is not available at this endpoint)")
        }
        Some(active) => {
            let waited = active.oldest_runnable_created_ms.map(|ms| {
                let secs = (chrono::Utc::now().timestamp_millis() - ms).max(0) / 1000;
                format!("{}h {:02}m", secs / 3600, secs / 60 % 60)
            });
            let jobs: Vec<String> = active
                .by_status
                .iter()
                .map(|(k, v)| match (k.as_str(), &waited) {
                    ("RUNNABLE", Some(w)) => {
                        format!("{k} {v}, the oldest submitted {w} ago")
                    }
                    _ => format!("{k} {v}"),
                })
                .collect();
            println!(
                "active Batch jobs: {} ({})",
                active.total,
                if jobs.is_empty() {
                    "none".into()
                } else {
                    jobs.join(", ")
                }
            );
        }
    }
}

/// The retry queue and failure DLQ, the cancelled attempts, the open ends (this campaign's and
/// the others') and the parked retries.
fn print_queues_and_open_ends(s: &status::Status) {
    println!(
        "retry queue: {} waiting, {} in flight; failure DLQ: {} waiting, {} in flight",
        s.retry_queue.visible,
        s.retry_queue.in_flight,
        s.failure_dlq.visible,
        s.failure_dlq.in_flight
    );
    if s.cancelled > 0 {
        println!(
            "cancelled: {} attempts wait for `granary resume --cancelled`",
            s.cancelled
        );
    }
    let open = &s.open_ends;
    if open.windows + open.attempts == 0 {
        println!("open ends: none in this campaign (no window or requeued attempt is marked open)");
    } else {
        println!(
            "open ends: {} windows (each until the reconciler finds every granule's end handled) and {} requeued attempts awaiting their end{}",
            open.windows,
            open.attempts,
            least_recently_written(open)
        );
    }
    for other in &s.other_campaigns {
        let ends = &other.open_ends;
        println!(
            "open ends in campaign {}: {} windows and {} requeued attempts (the reconciler still visits it){}",
            other.campaign.as_deref().unwrap_or("(unnamed)"),
            ends.windows,
            ends.attempts,
            least_recently_written(ends)
        );
    }
    if let Some(why) = &s.other_campaigns_error {
        println!("open ends in other campaigns: unknown ({why})");
    }
    if s.parked_retries > 0 {
        println!(
            "parked: {} retries wait for the feeder's next window of retries",
            s.parked_retries
        );
    }
}

/// Whether the feeder is held, waits or runs, the downstream queue, the throughput and the ETA.
fn print_feeder_and_pace(s: &status::Status) {
    match (
        &s.hold,
        s.downstream.as_ref().and_then(|d| d.feeder_waits.as_ref()),
    ) {
        (Some(h), _) => {
            println!("feeder: HELD — {}", h.describe());
            for seen in &h.evidence {
                println!("  behind it: {seen}");
            }
        }
        (None, Some(why)) => println!("feeder: WAITS — {why}"),
        (None, None) => println!("feeder: running (no hold)"),
    }
    if let Some(d) = &s.downstream {
        println!(
            "downstream queue: {} waiting, {} in flight (the feeder waits past {})",
            d.waiting, d.in_flight, d.max_messages
        );
    }
    for r in &s.rates {
        println!(
            "throughput over the last {:>2} h: {:.0} granules/h ({} submitted)",
            r.window_hours, r.per_hour, r.rows
        );
    }
    match &s.eta {
        Some(e) if e.remaining_rows == 0 => println!("every known row is submitted"),
        Some(e) => println!(
            "ETA: {} rows left at {:.0}/h → {:.1} h, around {}",
            e.remaining_rows,
            e.per_hour,
            e.hours,
            e.at.format("%Y-%m-%d %H:%M UTC")
        ),
        None => println!("ETA: unknown — nothing was submitted in the last 24 h (held, waiting on downstream, or at the active-job threshold?)"),
    }
    if let Some(p) = &s.pace {
        println!("{}", super::pace::describe(&p.pace, &p.forecast));
    }
}
