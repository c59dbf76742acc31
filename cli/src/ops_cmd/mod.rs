//! The operators' commands: status, report, redrive, hold, release, resume. They read the same
//! GRANARY_* variables as the Lambdas (docs/configuration.md); AWS_ENDPOINT_URL points them at an
//! emulator.
//!
//! Each command's arguments and run function are in its own file; this module holds what several
//! share.

mod audit;
mod hold;
mod pace;
mod plan;
mod redrive;
mod redrive_events;
mod redrive_imports;
mod report;
mod resume;
mod revalidate;
mod status;

pub use audit::{audit, AuditArgs};
pub use hold::{hold, release, HoldArgs};
pub use pace::{pace, PaceArgs};
pub use plan::{plan, PlanArgs};
pub use redrive::{redrive, RedriveArgs};
pub use redrive_events::{redrive_events, RedriveEventsArgs};
pub use redrive_imports::{redrive_imports, RedriveImportsArgs};
pub use report::{report, ReportArgs};
pub use resume::{resume, ResumeArgs};
pub use revalidate::{revalidate, RevalidateArgs};
pub use status::{status, StatusArgs};

use anyhow::{bail, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use granary::domain::granule::GranuleId;
use granary::domain::lifecycle::ItemState;
use granary::handlers::redrive::RedriveOptions;
use granary::handlers::Ctx;
use std::process::ExitCode;

/// How a redrive moves messages: both redrive commands take these.
#[derive(clap::Args)]
pub struct Pace {
    /// List what would be moved; move nothing.
    #[arg(long)]
    dry_run: bool,
    /// Stop after this many.
    #[arg(long)]
    max: Option<u64>,
    /// At most this many messages per second.
    #[arg(long, default_value_t = 50.0)]
    rate: f64,
    #[arg(long)]
    json: bool,
}

impl Pace {
    fn options(&self) -> Result<RedriveOptions> {
        if self.rate <= 0.0 {
            bail!("--rate must be above 0");
        }
        Ok(RedriveOptions {
            dry_run: self.dry_run,
            max: self.max,
            per_second: self.rate,
            ..RedriveOptions::default()
        })
    }
}

/// What a DLQ-to-queue move did (or, in a dry run, would do): JSON, or a table of the parked
/// messages (`what` names their first column) and a line saying where they went.
fn print_moved(
    s: &granary::handlers::redrive::RedriveSummary,
    json: bool,
    dry_run: bool,
    what: &str,
    queue: &str,
) -> Result<ExitCode> {
    if json {
        println!("{}", serde_json::to_string_pretty(s)?);
        return Ok(ExitCode::SUCCESS);
    }
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED)
        .set_header([what, "why it was parked"]);
    for m in &s.matched {
        t.add_row([m.granule_id.clone(), m.reason.clone()]);
    }
    println!("{t}");
    if dry_run {
        println!("dry run: {} would be moved to {queue}", s.matched.len());
    } else {
        println!("moved {} to {queue}", s.redriven);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_missing(missing: &[String]) {
    for id in missing {
        println!("no item {id}");
    }
}

/// Success, unless an item named was not found (exit code 1).
fn exit_unless_missing(missing: &[String]) -> ExitCode {
    if missing.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// The items a command names: `ids`, and every item in `state` when given (which must be one of
/// `allowed`, else the error says which are and `why`).
async fn named_items(
    ctx: &Ctx,
    ids: &[String],
    state: Option<&str>,
    allowed: &[ItemState],
    why: &str,
) -> Result<Vec<GranuleId>> {
    let mut out: Vec<GranuleId> = ids
        .iter()
        .map(|i| GranuleId::parse(i).map_err(anyhow::Error::from))
        .collect::<Result<_>>()?;
    if let Some(state) = state {
        let state: ItemState = state.parse()?;
        if !allowed.contains(&state) {
            let names: Vec<&str> = allowed.iter().map(|s| s.as_str()).collect();
            bail!("--state must be {}: {why}", names.join(", "));
        }
        let query = granary::domain::item::ItemQuery {
            state: Some(state),
            ..Default::default()
        };
        out.extend(ctx.items().find(&query).await?.into_iter().map(|r| r.id));
    }
    Ok(out)
}
