//! `granary items`: the item finders (by id, name, state, completion, update time, log message,
//! creation day), an item's history, and the status of its steps (seed 001's finders).

use anyhow::{bail, Context, Result};
use chrono::{DateTime, NaiveDate, Utc};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use granary::adapters::aws::AwsClients;
use granary::domain::granule::GranuleId;
use granary::domain::item::{HistoryEntry, ItemQuery, ItemRecord};
use granary::domain::item_steps::{StepQuery, StepStatus, StepType};
use granary::domain::lifecycle::ItemState;
use granary::repositories::items::{ItemPrefixes, Items};
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// The bucket holding granary's state.
    #[arg(long, env = "GRANARY_BUCKET")]
    bucket: String,
    /// The campaign whose items these are (docs/campaigns.md); unset: the bucket's root.
    #[arg(long, env = "GRANARY_CAMPAIGN")]
    campaign: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: ItemsCommand,
}

#[derive(clap::Subcommand)]
enum ItemsCommand {
    /// One item's record, by id.
    ///
    /// Example: granary items get HLS.S30.T01GBH.2022226T214921.v2.0
    #[command(verbatim_doc_comment)]
    Get { id: String },
    /// Items matching every filter given (no filter: all items).
    ///
    /// Examples:
    ///   granary items find --state PROCESSING_FAILED
    ///   granary items find --complete false --updated-after 2026-11-01T00:00:00Z
    ///   granary items find --log 'Host EC2' --json
    ///   granary items find --created-on 2026-11-22 --name HLS.S30.T01GBH.2022226T214921.v2.0
    #[command(verbatim_doc_comment)]
    Find(FindArgs),
    /// An item's transitions, oldest first, from the append-only history.
    ///
    /// Example: granary items history f0123456789abcdef0123456789abcdef
    #[command(verbatim_doc_comment)]
    History { id: String },
    /// The status of each step of items' workflows (a download attempt, the admission, a
    /// processing attempt), read from the history, matching every filter given. Without
    /// --item or --id it reads every item's history: at scale, query the Athena view
    /// granary_item_steps instead.
    ///
    /// Examples:
    ///   granary items steps --item f0123456789abcdef0123456789abcdef
    ///   granary items steps --complete false --type processing
    ///   granary items steps --id f0123456789abcdef0123456789abcdef.3 --json
    #[command(verbatim_doc_comment)]
    Steps(StepsArgs),
}

#[derive(clap::Args)]
struct StepsArgs {
    /// A step's id (`<item id>.<seq>`).
    #[arg(long)]
    id: Option<String>,
    /// Exact step name ("download attempt 1", "admission", "processing attempt 2").
    #[arg(long)]
    name: Option<String>,
    /// Steps complete (true) or still running (false).
    #[arg(long)]
    complete: Option<bool>,
    /// The item whose steps to list.
    #[arg(long)]
    item: Option<String>,
    /// download, admission or processing.
    #[arg(long = "type")]
    step_type: Option<String>,
}

#[derive(clap::Args)]
struct FindArgs {
    /// Exact item name.
    #[arg(long)]
    name: Option<String>,
    /// Current state (DISCOVERED, READY, PROCESSING_FAILED, ...).
    #[arg(long)]
    state: Option<String>,
    /// Workflow complete: the product made and stored (true), or not (false).
    #[arg(long)]
    complete: Option<bool>,
    /// In a terminal state, success or not (true), or not (false).
    #[arg(long)]
    terminal: Option<bool>,
    /// Updated after this RFC 3339 time.
    #[arg(long)]
    updated_after: Option<String>,
    /// A log message matches this regex.
    #[arg(long)]
    log: Option<String>,
    /// Created on this day (YYYY-MM-DD, UTC).
    #[arg(long)]
    created_on: Option<String>,
}

impl FindArgs {
    fn query(&self) -> Result<ItemQuery> {
        Ok(ItemQuery {
            name: self.name.clone(),
            state: self
                .state
                .as_deref()
                .map(str::parse::<ItemState>)
                .transpose()?,
            workflow_complete: self.complete,
            terminal: self.terminal,
            updated_after: self
                .updated_after
                .as_deref()
                .map(|t| {
                    DateTime::parse_from_rfc3339(t)
                        .map(|t| t.with_timezone(&Utc))
                        .with_context(|| {
                            format!(
                                "--updated-after {t:?}: use RFC 3339, e.g. 2026-11-01T00:00:00Z"
                            )
                        })
                })
                .transpose()?,
            log_message: self
                .log
                .as_deref()
                .map(|r| {
                    regex::Regex::new(r)
                        .with_context(|| format!("--log {r:?} is not a valid regex"))
                })
                .transpose()?,
            created_on: self
                .created_on
                .as_deref()
                .map(|d| {
                    NaiveDate::parse_from_str(d, "%Y-%m-%d")
                        .with_context(|| format!("--created-on {d:?}: use YYYY-MM-DD"))
                })
                .transpose()?,
        })
    }
}

/// The item prefixes of `campaign` (a named campaign's state lives under its own root).
fn campaign_prefixes(campaign: Option<&str>) -> Result<ItemPrefixes> {
    use granary::domain::campaign::{rerooted, Campaign};
    let campaign = campaign
        .filter(|c| !c.is_empty())
        .map(Campaign::parse)
        .transpose()
        .context("GRANARY_CAMPAIGN / --campaign")?;
    let root = ItemPrefixes::default();
    let moved = |key: &str| rerooted(key, None, campaign.as_ref());
    Ok(ItemPrefixes {
        items: moved(&root.items),
        history: moved(&root.history),
        inflight: moved(&root.inflight),
    })
}

pub async fn run(args: Args) -> Result<ExitCode> {
    let clients = AwsClients::from_env().await;
    let prefixes = campaign_prefixes(args.campaign.as_deref())?;
    let items = Items::new(
        granary::wiring::s3_store(&clients, &args.bucket),
        prefixes.clone(),
    );
    match &args.command {
        ItemsCommand::Get { id } => {
            let id = parse_id(id)?;
            let Some(found) = items.get(&id).await? else {
                eprintln!("no item {id} in s3://{}/{}", args.bucket, prefixes.items);
                return Ok(ExitCode::from(1));
            };
            print_records(&[found.value], args.json)?;
        }
        ItemsCommand::Find(f) => {
            let query = f.query()?;
            let found = items.find(&query).await?;
            print_records(&found, args.json)?;
            if !args.json {
                eprintln!("{} item(s)", found.len());
            }
        }
        ItemsCommand::History { id } => {
            let id = parse_id(id)?;
            let entries = items.history(&id).await?;
            if entries.is_empty() {
                eprintln!(
                    "no history for {id} under s3://{}/{}",
                    args.bucket, prefixes.history
                );
                return Ok(ExitCode::from(1));
            }
            print_history(&entries, args.json)?;
        }
        ItemsCommand::Steps(a) => {
            let query = StepQuery {
                id: a.id.clone(),
                name: a.name.clone(),
                step_complete: a.complete,
                item: a.item.as_deref().map(parse_id).transpose()?,
                step_type: a
                    .step_type
                    .as_deref()
                    .map(str::parse::<StepType>)
                    .transpose()
                    .map_err(anyhow::Error::msg)?,
            };
            let steps = items.steps(&query).await?;
            print_steps(&steps, args.json)?;
            if !args.json {
                eprintln!("{} step(s)", steps.len());
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn parse_id(raw: &str) -> Result<GranuleId> {
    match GranuleId::parse(raw) {
        Ok(id) => Ok(id),
        Err(e) => bail!("{e}"),
    }
}

fn print_records(records: &[ItemRecord], json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(records)?);
        return Ok(());
    }
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED).set_header([
        "id",
        "name",
        "state",
        "downloads",
        "processing",
        "complete",
        "terminal",
        "last updated",
        "last message",
    ]);
    for r in records {
        table.add_row([
            r.id.to_string(),
            r.name.clone(),
            r.state.to_string(),
            r.attempts.download.to_string(),
            r.attempts.processing.to_string(),
            r.workflow_complete.to_string(),
            r.terminal.to_string(),
            r.last_updated.format("%Y-%m-%d %H:%M:%S").to_string(),
            r.log_messages.last().cloned().unwrap_or_default(),
        ]);
    }
    println!("{table}");
    Ok(())
}

fn print_steps(steps: &[StepStatus], json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(steps)?);
        return Ok(());
    }
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED).set_header([
        "id", "name", "type", "complete", "started", "ended", "ended in",
    ]);
    let time = |t: &DateTime<Utc>| t.format("%Y-%m-%d %H:%M:%S").to_string();
    for s in steps {
        table.add_row([
            s.id.clone(),
            s.name.clone(),
            s.step_type.as_str().to_owned(),
            s.step_complete.to_string(),
            time(&s.started),
            s.ended.as_ref().map(time).unwrap_or_default(),
            s.ended_in.map(|e| e.to_string()).unwrap_or_default(),
        ]);
    }
    println!("{table}");
    Ok(())
}

fn print_history(entries: &[HistoryEntry], json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(entries)?);
        return Ok(());
    }
    let mut table = Table::new();
    table
        .load_preset(UTF8_FULL_CONDENSED)
        .set_header(["seq", "at", "from", "to", "attempt", "by", "reason"]);
    for e in entries {
        table.add_row([
            e.seq.to_string(),
            e.at.format("%Y-%m-%d %H:%M:%S").to_string(),
            e.from
                .map(|s| s.to_string())
                .unwrap_or_else(|| "(created)".into()),
            e.to.to_string(),
            e.attempt.to_string(),
            e.by.clone(),
            e.reason.clone(),
        ]);
    }
    println!("{table}");
    Ok(())
}
