//! What a finished Batch job means for granary: success, a failure the cloud caused (retry it),
//! or a failure our code caused (dead-letter it for a human).
//!
//! A FAILED event is always final. AWS Batch user guide, "Job states": FAILED means the job "has
//! failed all available attempts"; "Automated job retries": a failed attempt with attempts left
//! moves the job back to RUNNABLE (an event granary's rule filters out), and "Job timeouts": a
//! job that timed out, or was terminated or cancelled, is not retried whatever attempts remain.
//! So what the job's `retryStrategy` says about the last attempt is an explanation kept in the
//! log (`batch_rules`), never a reason to leave a FAILED event unrouted.

use super::batch_event::{JobDetail, JobStatus};
use super::retry_strategy::explain_batch_rules;
use serde::{Deserialize, Serialize};

/// How a job ended, as classified (not to be confused with a message's `outcome` attribute,
/// `contracts::messages::Outcome`, which says why a message is on its queue).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobOutcome {
    Success,
    Retryable,
    NonRetryable,
}

impl JobOutcome {
    /// As serialised (the `outcome` attribute of retry and DLQ messages).
    pub fn as_str(self) -> &'static str {
        match self {
            JobOutcome::Success => "SUCCESS",
            JobOutcome::Retryable => "RETRYABLE",
            JobOutcome::NonRetryable => "NON_RETRYABLE",
        }
    }
}

/// Where the monitor sends the granule after logging the outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Route {
    /// Succeeded: nothing more to do.
    Done,
    RetryQueue,
    FailureDlq,
    /// Ended by `granary cancel`: kept on the campaign's cancelled list for `granary resume
    /// --cancelled`, neither retried nor dead-lettered.
    Cancelled,
}

/// The cause of a failure, as precisely as the event tells it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum FailureKind {
    SpotInterruption,
    ContainerStartup {
        error: String,
    },
    ApplicationExit {
        exit_code: i64,
    },
    AttemptTimeout,
    /// The container used more memory than it reserved (`domain::memory`): retried with more.
    OutOfMemory,
    /// Cancelled by the job queue's `jobStateTimeLimitActions` after waiting in RUNNABLE for
    /// capacity (`CAPACITY:…`): the cloud's doing, worth another attempt later.
    Capacity {
        reason: String,
    },
    /// Cancelled by the job queue's `jobStateTimeLimitActions` because no compute environment
    /// can ever place it (`MISCONFIGURATION:…`): ours to fix, not to retry.
    Misconfiguration {
        reason: String,
    },
    Cancelled,
    /// Terminated by `granary cancel` (its reason names the cancel): the operator's, not a
    /// failure of the cloud or of the code.
    GranaryCancel {
        cancel: String,
    },
    Unknown,
}

impl FailureKind {
    /// The kind's name, without its details: the `FailureClass` of granary's metrics.
    pub fn class(&self) -> &'static str {
        match self {
            FailureKind::SpotInterruption => "spot_interruption",
            FailureKind::ContainerStartup { .. } => "container_startup",
            FailureKind::ApplicationExit { .. } => "application_exit",
            FailureKind::AttemptTimeout => "attempt_timeout",
            FailureKind::OutOfMemory => "out_of_memory",
            FailureKind::Capacity { .. } => "capacity",
            FailureKind::Misconfiguration { .. } => "misconfiguration",
            FailureKind::Cancelled => "cancelled",
            FailureKind::GranaryCancel { .. } => "granary_cancel",
            FailureKind::Unknown => "unknown",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Classification {
    pub outcome: JobOutcome,
    pub failure: Option<FailureKind>,
    /// How the job's `retryStrategy` reads on its last attempt (attempts used, the rule that
    /// matched): why Batch stopped retrying, for the operator. Never changes the route.
    #[serde(default)]
    pub batch_rules: String,
    pub reason: String,
}

impl Classification {
    pub fn route(&self) -> Route {
        match self.outcome {
            JobOutcome::Success => Route::Done,
            JobOutcome::Retryable => Route::RetryQueue,
            JobOutcome::NonRetryable
                if matches!(self.failure, Some(FailureKind::GranaryCancel { .. })) =>
            {
                Route::Cancelled
            }
            JobOutcome::NonRetryable => Route::FailureDlq,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("job {job_id} is {status:?}, not finished: nothing to classify")]
pub struct NotTerminal {
    pub job_id: String,
    pub status: JobStatus,
}

/// Errors that mean the cloud, not our code, failed to run the container.
const CONTAINER_STARTUP_ERRORS: [&str; 5] = [
    "CannotPullContainerError",
    "CannotStartContainerError",
    "CannotInspectContainerError",
    "ResourceInitializationError",
    "DockerTimeoutError",
];

const TASK_FAILED_TO_START: &str = "task failed to start";
const ATTEMPT_TIMEOUT: &str = "Job attempt duration exceeded timeout";

/// "Host EC2 (instance i-0123456789abcdef0) terminated." — the Spot reclaim signature.
pub fn is_spot_interruption(status_reason: &str) -> bool {
    status_reason
        .strip_prefix("Host EC2 (instance i-")
        .and_then(|rest| rest.strip_suffix(") terminated."))
        .is_some_and(|id| !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric()))
}

fn container_startup_error(text: &str) -> Option<String> {
    if let Some(name) = CONTAINER_STARTUP_ERRORS.iter().find(|e| text.contains(*e)) {
        return Some((*name).to_owned());
    }
    text.to_ascii_lowercase()
        .contains(TASK_FAILED_TO_START)
        .then(|| "TaskFailedToStart".to_owned())
}

/// What Batch writes as a job's `statusReason` when its job queue's `jobStateTimeLimitActions`
/// cancel it in RUNNABLE, followed by the action's reason (AWS Batch user guide, "Jobs stuck in
/// RUNNABLE due to capacity" and "… due to misconfiguration": e.g. `Canceled by JobStateTimeLimit
/// action due to reason: CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY`).
pub const STATE_TIME_LIMIT: &str = "Canceled by JobStateTimeLimit action due to reason: ";

fn is_cancellation(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    lower.contains("cancel")
        || lower.contains("terminated by user")
        || lower.contains("terminated by the user")
        || lower.contains("terminatejob")
}

/// Classify one finished job. Order matters: cloud causes are recognised before exit codes, since
/// a Spot kill can leave an arbitrary exit code behind; anything unrecognised is non-retryable so
/// a human looks at it instead of it looping.
pub fn classify(job: &JobDetail) -> Result<Classification, NotTerminal> {
    match job.status {
        JobStatus::Succeeded => {
            return Ok(Classification {
                outcome: JobOutcome::Success,
                failure: None,
                batch_rules: explain_batch_rules(job),
                reason: "job succeeded".to_owned(),
            })
        }
        JobStatus::Failed => {}
        status => {
            return Err(NotTerminal {
                job_id: job.job_id.clone(),
                status,
            })
        }
    }
    let (outcome, failure, reason) = failure_of(job);

    Ok(Classification {
        outcome,
        failure: Some(failure),
        batch_rules: explain_batch_rules(job),
        reason,
    })
}

/// What a failure is, its route and its reason, in the order `classify` says matters.
type Verdict = (JobOutcome, FailureKind, String);

/// The reasons a failed job's description gives: its last attempt's, its own, its container's.
struct Reasons<'a> {
    status: &'a str,
    job: &'a str,
    container: &'a str,
}

fn failure_of(job: &JobDetail) -> Verdict {
    let r = Reasons {
        status: job.attempt_status_reason().unwrap_or(""),
        job: job.status_reason.as_deref().unwrap_or(""),
        container: job.container_reason().unwrap_or(""),
    };
    granary_cancel(&r)
        .or_else(|| cloud_failure(&r))
        .or_else(|| watchdog_cancel(&r))
        .or_else(|| user_cancel(&r))
        .or_else(|| out_of_memory(&r))
        .or_else(|| {
            job.exit_code().filter(|c| *c != 0).map(|code| {
                (
                    JobOutcome::NonRetryable,
                    FailureKind::ApplicationExit { exit_code: code },
                    format!("application exited with code {code}"),
                )
            })
        })
        .unwrap_or_else(|| {
            let detail = if r.job.is_empty() {
                "no status reason"
            } else {
                r.job
            };
            (
                JobOutcome::NonRetryable,
                FailureKind::Unknown,
                format!("unrecognised failure: {detail}"),
            )
        })
}

/// First: the job's reason is the one granary's TerminateJob gave, whatever its last attempt
/// shows (a terminated container exits 137).
fn granary_cancel(r: &Reasons) -> Option<Verdict> {
    let cancel = super::cancel::cancel_of(r.job)?;
    Some((
        JobOutcome::NonRetryable,
        FailureKind::GranaryCancel {
            cancel: cancel.to_owned(),
        },
        format!("cancelled: {}", r.job),
    ))
}

/// What the cloud broke: a Spot interruption, a container that could not start, an attempt
/// that timed out.
fn cloud_failure(r: &Reasons) -> Option<Verdict> {
    let (status_reason, job_reason, container_reason) = (r.status, r.job, r.container);
    if is_spot_interruption(status_reason) || is_spot_interruption(job_reason) {
        let why = if is_spot_interruption(status_reason) {
            status_reason
        } else {
            job_reason
        };
        return Some((
            JobOutcome::Retryable,
            FailureKind::SpotInterruption,
            format!("spot interruption: {why}"),
        ));
    }
    if let Some(error) = container_startup_error(container_reason)
        .or_else(|| container_startup_error(status_reason))
        .or_else(|| container_startup_error(job_reason))
    {
        let detail = [container_reason, status_reason, job_reason]
            .into_iter()
            .find(|s| !s.is_empty())
            .unwrap_or("");
        let reason = format!("container failed to start ({error}): {detail}");
        return Some((
            JobOutcome::Retryable,
            FailureKind::ContainerStartup { error },
            reason,
        ));
    }
    // Batch never retries a job terminated at its attempt timeout ("Job timeouts": "If a job is
    // terminated for exceeding the timeout duration, it isn't retried"); the item lifecycle's
    // retry policy does (a slow node, a stalled read), through the requeuer, while the
    // granule's attempts last — then the requeuer dead-letters it and the item is ABANDONED,
    // like any retryable failure.
    (status_reason.starts_with(ATTEMPT_TIMEOUT) || job_reason.starts_with(ATTEMPT_TIMEOUT)).then(
        || {
            (
                JobOutcome::Retryable,
                FailureKind::AttemptTimeout,
                "attempt timed out".to_owned(),
            )
        },
    )
}

/// Before other cancels: the job queue's watchdog, not a person, cancelled it; capacity may come
/// back, a job no compute environment can place never will.
fn watchdog_cancel(r: &Reasons) -> Option<Verdict> {
    let why = r.job.strip_prefix(STATE_TIME_LIMIT)?.trim().to_owned();
    Some(if why.starts_with("CAPACITY:") {
        (
            JobOutcome::Retryable,
            FailureKind::Capacity {
                reason: why.clone(),
            },
            format!("cancelled in RUNNABLE waiting for capacity: {why}"),
        )
    } else {
        (
            JobOutcome::NonRetryable,
            FailureKind::Misconfiguration {
                reason: why.clone(),
            },
            format!("cancelled in RUNNABLE: no compute environment can run it: {why}"),
        )
    })
}

/// Before exit codes: a terminated job's container shows the 137 of its SIGKILL (published event
/// 14), which is the user's doing, not the application's (nor an out-of-memory kill).
fn user_cancel(r: &Reasons) -> Option<Verdict> {
    (is_cancellation(r.job) || is_cancellation(r.status)).then(|| {
        (
            JobOutcome::NonRetryable,
            FailureKind::Cancelled,
            format!("cancelled or terminated: {}", r.job),
        )
    })
}

/// After the cloud's ends and the cancels (a reclaimed or terminated container exits 137 too,
/// so the exit code alone says nothing): the container reason ECS gives a task stopped for its
/// memory, "OutOfMemoryError: Container killed due to memory usage" (`domain::memory`).
fn out_of_memory(r: &Reasons) -> Option<Verdict> {
    r.container.starts_with(OUT_OF_MEMORY).then(|| {
        (
            JobOutcome::Retryable,
            FailureKind::OutOfMemory,
            format!("out of memory: {}", r.container),
        )
    })
}

/// How the container reason of a task stopped for its memory begins.
pub const OUT_OF_MEMORY: &str = "OutOfMemoryError";

#[cfg(test)]
mod tests;
