use anyhow::{Context, Result};
use granary::domain::batch_event::{BatchJobStateChange, JobDetail};
use granary::domain::classify::{classify, Route};
use granary::domain::retry_strategy::{batch_retry_decision, BatchRetryDecision};
use std::io::Read;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// The event as JSON: an EventBridge "Batch Job State Change" event, or just its detail
    /// (a DescribeJobs JobDetail). `-` reads standard input.
    event: String,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let text = if args.event == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("reading the event from standard input")?;
        s
    } else {
        std::fs::read_to_string(&args.event).with_context(|| format!("reading {}", args.event))?
    };
    let value: serde_json::Value = serde_json::from_str(&text).context("the event is not JSON")?;
    let job: JobDetail = if value.get("detail").is_some() {
        BatchJobStateChange::from_value(value)
            .context("not a Batch Job State Change event (expected source aws.batch)")?
            .detail
    } else {
        serde_json::from_value(value)
            .context("not a Batch JobDetail (need jobId, jobName, jobQueue, status)")?
    };
    let Ok(c) = classify(&job) else {
        let msg = format!(
            "job {} is {}: not finished, the monitor ignores it",
            job.job_id,
            job.status.as_str()
        );
        if args.json {
            println!(
                "{}",
                serde_json::json!({"job_id": job.job_id, "status": job.status, "route": "ignored", "reason": msg})
            );
        } else {
            println!("{msg}");
        }
        return Ok(ExitCode::SUCCESS);
    };
    let route = c.route();
    let batch = match batch_retry_decision(&job) {
        BatchRetryDecision::WillRetry { rule: Some(i) } => {
            format!("Batch will retry (evaluateOnExit rule {i} says RETRY)")
        }
        BatchRetryDecision::WillRetry { rule: None } => {
            "Batch will retry (no evaluateOnExit rule matched)".to_owned()
        }
        BatchRetryDecision::Exit { why } => format!("Batch will not retry: {why}"),
    };
    let route_text = match route {
        Route::Done => "log under outcome=success; relocate earlier failure logs",
        Route::BatchRetries => "log only: Batch's RetryStrategy runs another attempt",
        Route::RetryQueue => "log under outcome=failure, then send to the retry queue",
        Route::FailureDlq => "log under outcome=failure, then send to the failure DLQ",
    };
    if args.json {
        let out = serde_json::json!({
            "job_id": job.job_id,
            "job_name": job.job_name,
            "granule_id": job.env("GRANULE_ID").or(job.parameters.get("granule_id").map(String::as_str)),
            "attempt": job.env("ATTEMPT").or(job.parameters.get("attempt").map(String::as_str)),
            "classification": c.outcome,
            "failure": c.failure,
            "batch_will_retry": c.batch_will_retry,
            "batch_decision": batch,
            "route": route,
            "reason": c.reason,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!("job:            {} ({})", job.job_id, job.job_name);
        if let Some(g) = job.env("GRANULE_ID") {
            println!(
                "granule:        {g} attempt {}",
                job.env("ATTEMPT").unwrap_or("?")
            );
        }
        println!("classification: {:?}", c.outcome);
        println!("reason:         {}", c.reason);
        println!("batch:          {batch}");
        println!("route:          {route_text}");
    }
    Ok(ExitCode::SUCCESS)
}
