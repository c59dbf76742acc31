//! `granary hold` and `granary release`: stop the feeder submitting, and let it go on.

use anyhow::Result;
use granary::domain::hold::Hold;
use std::process::ExitCode;

use crate::operator::ctx;

#[derive(clap::Args)]
pub struct HoldArgs {
    /// Why (shown by status and in the feeder's log).
    #[arg(long)]
    reason: String,
    /// Who holds it (default: $USER).
    #[arg(long, env = "USER", default_value = "operator")]
    by: String,
}

pub async fn hold(args: HoldArgs) -> Result<ExitCode> {
    let ctx = ctx(&[]).await?;
    let hold = Hold {
        reason: args.reason,
        held_by: args.by,
        at: chrono::Utc::now(),
        evidence: Vec::new(),
        cancel: None,
    };
    match ctx.hold().place(&hold).await? {
        None => {
            println!("feeder held: it submits nothing until `granary release`; its place is kept")
        }
        Some(existing) => println!("already {}", existing.describe()),
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn release() -> Result<ExitCode> {
    let ctx = ctx(&[]).await?;
    match ctx.hold().read().await? {
        None => println!("the feeder is not held"),
        Some(h) => {
            ctx.hold().release().await?;
            println!(
                "released (was {}); the next feeder run resumes where it stopped",
                h.describe()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
