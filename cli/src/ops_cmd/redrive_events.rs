//! `granary redrive-events`: Batch job events from the events DLQ back to the events queue.

use anyhow::Result;
use std::process::ExitCode;

use super::{print_moved, Pace};
use crate::operator::bar;

#[derive(clap::Args)]
pub struct RedriveEventsArgs {
    /// The events DLQ (the stack's BatchEventsDlqUrl output).
    #[arg(long, env = "GRANARY_EVENTS_DLQ_URL")]
    from: String,
    /// The events queue the job monitor reads (the stack's BatchEventsQueueUrl output).
    #[arg(long, env = "GRANARY_EVENTS_QUEUE_URL")]
    to: String,
    #[command(flatten)]
    pace: Pace,
}

pub async fn redrive_events(args: RedriveEventsArgs) -> Result<ExitCode> {
    let opts = args.pace.options()?;
    let clients = granary::adapters::aws::AwsClients::from_env().await;
    let from = granary::wiring::sqs_queue(&clients, &args.from);
    let to = granary::wiring::sqs_queue(&clients, &args.to);
    let depth = from.depth().await?;
    let b = bar(
        depth.visible,
        if opts.dry_run { "examined" } else { "moved" },
    );
    let s = granary::handlers::redrive::redrive_events(from.as_ref(), to.as_ref(), &opts, &|s| b.set_position(s.redriven))
        .await
        .map_err(|e| {
            // The events queue denies every sender but the Batch rule and the stack's
            // EventsRedriveRoleArns (infra/template.yaml, BatchEventsQueuePolicy).
            let denied = format!("{e:?}").contains("AccessDenied");
            anyhow::Error::new(e).context(if denied {
                "redrive-events was denied: the events queue accepts only the Batch rule and the roles in the stack's EventsRedriveRoleArns parameter; add yours and run it again (nothing is lost)"
            } else {
                "redrive-events stopped (nothing is lost: an event leaves the DLQ only once it is on the events queue; run it again)"
            })
        })?;
    b.finish_and_clear();
    print_moved(&s, args.pace.json, opts.dry_run, "job", "the events queue")
}
