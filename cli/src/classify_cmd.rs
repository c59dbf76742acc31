use anyhow::{Context, Result};
use granary::domain::batch_event::{BatchJobStateChange, JobDetail, DETAIL_TYPE, SOURCE};
use granary::domain::classify::{classify, Classification, Route};
use granary::domain::job_end::{on_job_event, EventRejection, FinishedJob, JobEnd, WindowChildEnd};
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
    let event = read_event(&args.event)?;
    // Exactly the monitor's decision: what it rejects, this command rejects, with its reason —
    // after saying how the job ended, when the event is a job's end that names no granule (a
    // job granary did not submit).
    let (event, end) = match on_job_event(&event) {
        Ok(decided) => decided,
        Err(rejection @ EventRejection::NoGranule { .. }) if names_no_work(&event) => {
            return foreign(args.json, event, &rejection);
        }
        Err(rejection) => {
            return Err(anyhow::anyhow!(
                "the job monitor rejects this event ({}): {rejection}; it would be recorded under \
                 the reject prefix and sent to the failure DLQ",
                rejection.kind().as_str()
            ))
        }
    };
    let job = &event.detail;
    let finished = match end {
        JobEnd::NotFinished { job_id, status } => {
            let msg = format!(
                "job {job_id} is {}: not finished, the monitor ignores it",
                status.as_str()
            );
            return ignored(args.json, &job_id, status, &msg);
        }
        JobEnd::IngestJob {
            job_id,
            ingest_job,
            classification,
            ..
        } => {
            print_ingest_job(args.json, &job_id, &ingest_job, &classification);
            return Ok(ExitCode::SUCCESS);
        }
        JobEnd::ArrayParent { job_id, status } => {
            let msg = format!(
                "job {job_id} is an array window's parent, {}: each child's own event routes its \
                 granule, so the monitor ignores the parent's",
                status.as_str()
            );
            return ignored(args.json, &job_id, status, &msg);
        }
        JobEnd::WindowChild(child) => {
            print_window_child(args.json, &child, job)?;
            return Ok(ExitCode::SUCCESS);
        }
        JobEnd::Finished(f) => f,
    };
    print_finished(args.json, &finished, job)?;
    Ok(ExitCode::SUCCESS)
}

/// The event read from a file or standard input (`-`), a bare JobDetail wrapped as the rule
/// would deliver it.
fn read_event(path: &str) -> Result<serde_json::Value> {
    let text = if path == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("reading the event from standard input")?;
        s
    } else {
        std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?
    };
    let value: serde_json::Value = serde_json::from_str(&text).context("the event is not JSON")?;
    // A bare JobDetail (as DescribeJobs returns it) is classified as the rule would deliver it.
    Ok(if value.get("detail").is_some() {
        value
    } else {
        serde_json::json!({"detail-type": DETAIL_TYPE, "source": SOURCE, "detail": value})
    })
}

/// Prints an ingest job's processing job's end and where it takes the ingest job.
fn print_ingest_job(json: bool, job_id: &str, ingest_job: &str, classification: &Classification) {
    let next = match classification.route() {
        Route::Done => "the ingest job goes on to recording",
        Route::RetryQueue => {
            "the ingest job's next processing attempt, while GRANARY_MAX_RETRIES lasts"
        }
        Route::FailureDlq => "the ingest job fails and is dead-lettered",
        Route::Cancelled => "the ingest job fails (cancelled)",
    };
    let msg = format!(
        "job {job_id} processes ingest job {ingest_job}: {} ({}) → {next}",
        classification.outcome.as_str(),
        classification.reason
    );
    if json {
        println!(
            "{}",
            serde_json::json!({"job_id": job_id, "ingest_job": ingest_job,
                "outcome": classification.outcome.as_str(), "route": classification.route(),
                "reason": classification.reason, "next": next})
        );
    } else {
        println!("{msg}");
    }
}

/// Prints an array window's child's end: its granule in the window claim, and its route.
fn print_window_child(json: bool, child: &WindowChildEnd, job: &JobDetail) -> Result<()> {
    let c = &child.classification;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "job_id": child.job_id, "job_name": job.job_name,
                "window_claim": child.claim_key, "index": child.index,
                "attempt": child.attempt, "attempt_is_the_arrays_lowest":
                    child.claim_key.contains(&format!("windows/{}/", granary::domain::window::RETRY_WINDOWS)),
                "classification": c.outcome,
                "failure": c.failure, "batch_rules": c.batch_rules,
                "route": child.route, "reason": c.reason,
            }))?
        );
    } else {
        println!("job:            {} ({})", child.job_id, job.job_name);
        // A window of retries holds each child's own attempt: the array's is the lowest.
        let attempt = if child.claim_key.contains(&format!(
            "windows/{}/",
            granary::domain::window::RETRY_WINDOWS
        )) {
            format!(
                "its own in the claim (the array's lowest is {})",
                child.attempt
            )
        } else {
            child.attempt.to_string()
        };
        println!(
            "granule:        granule {} of window claim {} (the monitor reads it), attempt {attempt}",
            child.index, child.claim_key
        );
        println!("classification: {:?}", c.outcome);
        println!("reason:         {}", c.reason);
        println!("batch rules:    {}", c.batch_rules);
        println!("route:          {}", route_text(child.route));
    }
    Ok(())
}

/// Prints a granule's finished job: its classification and route.
fn print_finished(json: bool, finished: &FinishedJob, job: &JobDetail) -> Result<()> {
    let c = &finished.classification;
    let route_text = route_text(finished.route);
    if json {
        let out = serde_json::json!({
            "job_id": job.job_id,
            "job_name": job.job_name,
            "granule_id": finished.granule.granule_id,
            "attempt": finished.granule.attempt,
            "campaign": finished.campaign,
            "classification": c.outcome,
            "failure": c.failure,
            "batch_rules": c.batch_rules,
            "route": finished.route,
            "reason": c.reason,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!("job:            {} ({})", job.job_id, job.job_name);
        println!(
            "granule:        {} attempt {}",
            finished.granule.granule_id, finished.granule.attempt
        );
        if let Some(campaign) = &finished.campaign {
            println!("campaign:       {campaign} (its state under campaigns/{campaign}/)");
        }
        println!("classification: {:?}", c.outcome);
        println!("reason:         {}", c.reason);
        println!("batch rules:    {}", c.batch_rules);
        println!("route:          {route_text}");
    }
    Ok(())
}

/// What the monitor does for a granule's end on `route`.
fn route_text(route: Route) -> &'static str {
    match route {
        Route::Done => "log under outcome=success; relocate earlier failure logs",
        Route::RetryQueue => "log under outcome=failure, then send to the retry queue",
        Route::FailureDlq => "log under outcome=failure, then send to the failure DLQ",
        Route::Cancelled => {
            "log under outcome=failure, then list under claims/cancelled/ for `granary resume --cancelled`"
        }
    }
}

/// Whether the event's job carries none of granary's tags (no granule, no window claim, no
/// ingest job): someone else's job. A job that carries them badly (an attempt of -1, an id
/// granary cannot use) is granary's own, rejected with exit 2 as before.
fn names_no_work(event: &serde_json::Value) -> bool {
    use granary::domain::job_tags::{window_claim_of, GRANULE_ID_ENV, GRANULE_ID_PARAM};
    let Ok(parsed) = BatchJobStateChange::from_value(event) else {
        return false;
    };
    let job = &parsed.detail;
    job.env(GRANULE_ID_ENV).is_none()
        && !job.parameters.contains_key(GRANULE_ID_PARAM)
        && window_claim_of(job).is_none()
}

/// The exit code for a finished job that names no granule: classified (Batch's facts, whoever
/// submitted the job), then rejected by the monitor, which has nothing to log and route.
const FOREIGN_EXIT: u8 = 1;

/// A finished job that names no granule granary can use: how it ended and the route it would
/// take, then why the monitor rejects it (exit 1: it would be set aside, not routed).
fn foreign(json: bool, event: serde_json::Value, rejection: &EventRejection) -> Result<ExitCode> {
    let detail = BatchJobStateChange::from_value(&event)
        .map_err(|e| anyhow::anyhow!("the event is not a Batch Job State Change: {e}"))?
        .detail;
    let rejected = format!(
        "the job monitor rejects this event ({}): {rejection}; it would be recorded under the \
         reject prefix and sent to the failure DLQ",
        rejection.kind().as_str()
    );
    let c =
        classify(&detail).map_err(|_| anyhow::anyhow!("{rejected} (the job has not finished)"))?;
    let route = c.route();
    if json {
        let out = serde_json::json!({
            "job_id": detail.job_id, "job_name": detail.job_name,
            "classification": c.outcome, "failure": c.failure, "batch_rules": c.batch_rules,
            "would_route": route, "reason": c.reason,
            "rejected": {"kind": rejection.kind().as_str(), "reason": rejection.to_string()},
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!("job:            {} ({})", detail.job_id, detail.job_name);
        println!("granule:        none that granary can use");
        println!("classification: {:?}", c.outcome);
        println!("reason:         {}", c.reason);
        println!("batch rules:    {}", c.batch_rules);
        println!(
            "route:          {} — had it named a granule",
            route_text(route)
        );
        println!("monitor:        {rejected}");
    }
    Ok(ExitCode::from(FOREIGN_EXIT))
}

/// Prints an event the monitor ignores, and why.
fn ignored(
    json: bool,
    job_id: &str,
    status: granary::domain::batch_event::JobStatus,
    msg: &str,
) -> Result<ExitCode> {
    if json {
        println!(
            "{}",
            serde_json::json!({"job_id": job_id, "status": status, "route": "ignored", "reason": msg})
        );
    } else {
        println!("{msg}");
    }
    Ok(ExitCode::SUCCESS)
}
