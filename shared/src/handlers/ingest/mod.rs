//! The ingest queue's steps (design document 004), each a plain async function over
//! [`Ctx`]: submit, then — on every tick of the dispatcher's schedule — batches spawn their
//! jobs, jobs move through estimating, provisioning, downloading, processing (an AWS Batch job),
//! recording and notify, and batches whose jobs have all ended report and are cleaned up. A step
//! reads the queue's index for its state (priority order), takes each job with a compare-and-swap
//! on its record, and decides with `domain::ingest::decisions`.

pub mod batches;
pub mod container;
pub mod holds;
pub mod jobs;
pub mod operator;
pub mod processing;
pub mod storing;

use crate::domain::ingest::record::{BatchRecord, Submission};
use crate::handlers::HandlerError;
use serde::Serialize;

pub use crate::config::ingest::IngestSettings;
use crate::handlers::Ctx;
/// A manifest larger than this is refused (it is read whole to spawn the batch's jobs).
pub const MAX_MANIFEST_BYTES: usize = 64 * 1024 * 1024;

/// Creates a pending batch and returns at once; the dispatcher spawns its jobs.
pub async fn submit(
    ctx: &Ctx,
    submission: Submission,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<BatchRecord, HandlerError> {
    let body = crate::contracts::encode("a submission", &submission)?;
    let key = format!("{}{}", String::from_utf8_lossy(&body), now.to_rfc3339());
    submit_keyed(ctx, submission, now, now, &key).await
}

/// Like [`submit`], with the batch id derived from `key` (a queue message's id) and `sent_at`
/// (when the message was sent): both are the same on every delivery of one message, so the
/// same message delivered twice, however far apart, creates one batch. `now` is when this
/// delivery took it.
pub async fn submit_keyed(
    ctx: &Ctx,
    submission: Submission,
    sent_at: chrono::DateTime<chrono::Utc>,
    now: chrono::DateTime<chrono::Utc>,
    key: &str,
) -> Result<BatchRecord, HandlerError> {
    use sha2::{Digest, Sha256};
    if submission.collection.is_empty()
        || !submission
            .collection
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(HandlerError::Refused(format!(
            "collection {:?}: letters, digits, '-' and '_' only",
            submission.collection
        )));
    }
    let digest = format!("{:x}", Sha256::digest(key.as_bytes()));
    let id = crate::domain::ingest::index::BatchId::new(sent_at, &digest);
    let record = BatchRecord::new(id, submission, now);
    Ok(ctx.ingest().create_batch(&record).await?)
}

/// The ingest-submit Lambda: each SQS record is a submission — its JSON, or an EventBridge event
/// whose `detail` is one (the notification bus's submission rule forwards them). A record that is
/// not a submission is reported failed; SQS redelivers it and then parks it in the submissions
/// DLQ, where its alarm fires. The batch id comes from the message id, so a redelivered message
/// creates no second batch.
pub async fn handle_submissions(
    ctx: &Ctx,
    event: aws_lambda_events::event::sqs::SqsEvent,
    now: chrono::DateTime<chrono::Utc>,
) -> aws_lambda_events::event::sqs::SqsBatchResponse {
    use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse};
    let mut response = SqsBatchResponse::default();
    for record in event.records {
        let id = record.message_id.clone().unwrap_or_default();
        let body = record.body.as_deref().unwrap_or("");
        // The batch id's time is the message's SentTimestamp, not this delivery's: a redelivery
        // minutes later must find the batch the first delivery made (Lambda's SQS event always
        // carries it; without it, only deliveries within the same second would agree).
        let sent_at = record
            .attributes
            .get("SentTimestamp")
            .and_then(|ms| ms.parse::<i64>().ok())
            .and_then(chrono::DateTime::from_timestamp_millis);
        if sent_at.is_none() {
            tracing::warn!(
                message = id,
                "submission without a SentTimestamp: a redelivery may make a second batch"
            );
        }
        let outcome = match crate::contracts::ingest::submission_of(body) {
            Err(why) => Err(why.to_string()),
            Ok(submission) => submit_keyed(ctx, submission, sent_at.unwrap_or(now), now, &id)
                .await
                .map(|b| tracing::info!(batch = %b.id, message = id, "batch submitted"))
                .map_err(|e| e.to_string()),
        };
        if let Err(why) = outcome {
            tracing::error!(
                message = id,
                error = why,
                "submission not taken; SQS will redeliver it"
            );
            let mut failure = BatchItemFailure::default();
            failure.item_identifier = id;
            response.batch_item_failures.push(failure);
        }
    }
    response
}

/// Runs one job's or batch's `step` within its share of the tick's `budget`
/// (`Budget::unit_share`: a quarter of what is left, or one request's time,
/// `GRANARY_INGEST_TIMEOUT_SECS`, and a margin, whichever is longer): `None` when the budget was spent before
/// it started, or when the step
/// outlived its share and was dropped where it stood — as a Lambda timeout would have dropped
/// it, which every step survives (the ingest crash-point harness): its job or batch is left for
/// the next tick, and the rest of this one goes on. So one depositor's server that hangs on a
/// HEAD, a download or a callback costs a share of a tick, not every tick's every later step.
pub(crate) async fn within_share<F>(
    budget: &crate::budget::Budget,
    settings: &IngestSettings,
    step: F,
) -> Option<F::Output>
where
    F: std::future::Future,
{
    if budget.spent() {
        return None;
    }
    match budget.unit_share(settings.timeout + REQUEST_TIMED_OUT_MARGIN) {
        // Too little left to start a step: one cut short mid-mint costs an operator's look
        // (its claim past its lease, MINT_UNKNOWN), so none starts with less than this.
        Some(share) if share < MIN_STEP_SHARE => None,
        Some(share) => tokio::time::timeout(share, step).await.ok(),
        None => Some(step.await),
    }
}

/// Counts what became of one job's or batch's step (`what` `id`, in `state`): done, failed
/// (logged; the next tick tries again), or left for the next tick ([`within_share`]'s `None`).
pub(crate) fn count_step(
    ran: Option<Result<(), HandlerError>>,
    what: &str,
    id: &dyn std::fmt::Display,
    state: &dyn std::fmt::Display,
    s: &mut TickSummary,
) {
    match ran {
        Some(Ok(())) => {}
        Some(Err(e)) => {
            tracing::error!(%what, id = %id, state = %state, error = %e, "the step failed; the next tick tries again");
            s.errors += 1;
        }
        None => {
            tracing::warn!(%what, id = %id, state = %state, "no time left in this tick for the step; the next tick takes it up");
            s.out_of_time += 1;
        }
    }
}

/// The least time a job's or batch's step is started with ([`within_share`]).
const MIN_STEP_SHARE: std::time::Duration = std::time::Duration::from_secs(10);

/// Whether a step that started at `step_started` may make another request: a step's share is
/// at least one request's timeout and [`REQUEST_TIMED_OUT_MARGIN`], so a request started within
/// the margin ends (answered or timed out) within the share, and its outcome is recorded.
/// Later than that, the next attempt is left to the next tick.
pub(crate) fn another_attempt_fits(step_started: tokio::time::Instant) -> bool {
    crate::mutants::on("timed-out-attempt-retried-in-step")
        || step_started.elapsed() <= REQUEST_TIMED_OUT_MARGIN
}

/// A step's share outlasts one request's timeout by this much, so that a request that times
/// out (a depositor's server that never answers) still has time to record its failed attempt.
/// With a share of exactly the timeout, the step was dropped as its request timed out: no
/// attempt was recorded, and the job tried again every tick for ever (`granary-local simulate
/// --ingest` found it).
const REQUEST_TIMED_OUT_MARGIN: std::time::Duration = std::time::Duration::from_secs(30);

/// What one tick of the dispatcher did, per step.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TickSummary {
    /// Held batches and jobs no hold covers any more, moved back to pending.
    pub released: u64,
    pub batches_spawned: u64,
    pub batches_held: u64,
    pub jobs_created: u64,
    pub dispatched: u64,
    pub held: u64,
    pub failed: u64,
    pub estimated: u64,
    pub provisioned: u64,
    pub waiting_for_capacity: u64,
    pub downloaded: u64,
    pub processing_submitted: u64,
    /// Processing jobs whose retryable end (found by DescribeJobs) starts their next attempt.
    pub processing_retried: u64,
    pub processed: u64,
    /// Downloads and callbacks that timed out, their next attempt left for the next tick.
    pub slow_attempts: u64,
    /// Objects stored (identifier, ERC and Dublin Core, files checked, storage manifest).
    pub stored: u64,
    pub recorded: u64,
    pub notified: u64,
    pub batches_reported: u64,
    pub batches_cleaned: u64,
    /// Completed batches whose cleanup waits for their archive job to have archived them.
    pub batches_waiting_for_archive: u64,
    /// Stale index markers repaired on the way.
    pub repaired: u64,
    /// Job and batch steps not run, or dropped, for want of the tick's time: each is taken up by
    /// the next tick.
    pub out_of_time: u64,
    /// Job and batch steps that failed (logged with their error); each is tried again next tick.
    pub errors: u64,
    /// Downloads and callbacks not tried this tick: their server let an earlier request of the
    /// tick run to the client's timeout (`hanging_hosts`).
    pub waiting_on_hosts: u64,
    /// The depositors' servers that let a request of this tick run to the client's timeout:
    /// the tick tries them no more, so one dead server costs a tick one request's time, not one
    /// for each of its objects, and the other servers' jobs go on.
    #[serde(skip)]
    pub hanging_hosts: std::collections::BTreeSet<String>,
}

impl TickSummary {
    /// Whether `url`'s server let a request of this tick run to its timeout.
    pub(crate) fn hangs(&self, url: &str) -> bool {
        host_of(url).is_some_and(|h| self.hanging_hosts.contains(&h))
    }

    /// `url`'s server let a request run to the client's timeout.
    pub(crate) fn hung(&mut self, url: &str) {
        if let Some(host) = host_of(url) {
            tracing::warn!(
                host,
                "a depositor's server let a request run to its timeout: not tried again this tick"
            );
            self.hanging_hosts.insert(host);
        }
    }
}

/// The server a URL names (none for a URL without a host).
fn host_of(url: &str) -> Option<String> {
    let parsed = reqwest::Url::parse(url).ok()?;
    Some(format!(
        "{}:{}",
        parsed.host_str()?,
        parsed.port_or_known_default().unwrap_or(0)
    ))
}

/// One pass of every step, in pipeline order. A step's trouble with one job is logged and left
/// for the next tick; the rest go on.
pub async fn tick(
    ctx: &Ctx,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<TickSummary, HandlerError> {
    let mut summary = TickSummary::default();
    let s = &mut summary;
    // A tick spends at most its planned share of the dispatcher's timeout; each job's or
    // batch's step at most a share of what is left (`within_share`).
    let budget = &crate::budget::Budget::of_invocation(ctx.config.leases.function_timeout);
    // Held with no hold left (a release that died after removing its hold): back to pending.
    let unheld = holds::release_unheld(ctx, None, "no hold covers it any more", now).await?;
    s.released = (unheld.batches.len() + unheld.jobs.len()) as u64;
    use crate::domain::ingest::{batch::BatchState as B, job::JobState as J};
    use batches::each_batch;
    use jobs::each_job;
    each_batch(ctx, B::Pending, now, budget, s, batches::spawn).await?;
    each_job(ctx, J::Pending, now, budget, s, jobs::dispatch).await?;
    each_job(ctx, J::Estimating, now, budget, s, jobs::estimate).await?;
    // Capacity is counted once a tick and grows with each job it admits.
    let mut used = jobs::in_flight(ctx).await?;
    let provision = async |ctx: &Ctx, j, now, s: &mut TickSummary| {
        jobs::provision(ctx, j, now, s, &mut used).await
    };
    each_job(ctx, J::Provisioning, now, budget, s, provision).await?;
    each_job(ctx, J::Downloading, now, budget, s, jobs::download).await?;
    each_job(ctx, J::Processing, now, budget, s, jobs::process).await?;
    each_job(ctx, J::Storing, now, budget, s, storing::store).await?;
    each_job(ctx, J::Recording, now, budget, s, jobs::record).await?;
    each_job(ctx, J::Notify, now, budget, s, jobs::notify).await?;
    each_batch(ctx, B::Processing, now, budget, s, batches::end_processing).await?;
    each_batch(ctx, B::Reporting, now, budget, s, batches::report).await?;
    each_batch(ctx, B::UpdateReporting, now, budget, s, batches::report).await?;
    each_batch(ctx, B::Completed, now, budget, s, batches::clean_up).await?;
    Ok(summary)
}

#[cfg(test)]
mod tests;
