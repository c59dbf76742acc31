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
    let status_reason = job.attempt_status_reason().unwrap_or("");
    let job_reason = job.status_reason.as_deref().unwrap_or("");
    let container_reason = job.container_reason().unwrap_or("");

    let (outcome, failure, reason) = if let Some(cancel) = super::cancel::cancel_of(job_reason) {
        // First: the job's reason is the one granary's TerminateJob gave, whatever its last
        // attempt shows (a terminated container exits 137).
        (
            JobOutcome::NonRetryable,
            FailureKind::GranaryCancel {
                cancel: cancel.to_owned(),
            },
            format!("cancelled: {job_reason}"),
        )
    } else if is_spot_interruption(status_reason) || is_spot_interruption(job_reason) {
        let why = if is_spot_interruption(status_reason) {
            status_reason
        } else {
            job_reason
        };
        (
            JobOutcome::Retryable,
            FailureKind::SpotInterruption,
            format!("spot interruption: {why}"),
        )
    } else if let Some(error) = container_startup_error(container_reason)
        .or_else(|| container_startup_error(status_reason))
        .or_else(|| container_startup_error(job_reason))
    {
        let detail = [container_reason, status_reason, job_reason]
            .into_iter()
            .find(|s| !s.is_empty())
            .unwrap_or("");
        let reason = format!("container failed to start ({error}): {detail}");
        (
            JobOutcome::Retryable,
            FailureKind::ContainerStartup { error },
            reason,
        )
    } else if status_reason.starts_with(ATTEMPT_TIMEOUT) || job_reason.starts_with(ATTEMPT_TIMEOUT)
    {
        // Batch never retries a job terminated at its attempt timeout ("Job timeouts": "If a
        // job is terminated for exceeding the timeout duration, it isn't retried"); the item
        // lifecycle's retry policy does (a slow node, a stalled read), through the requeuer,
        // while the granule's attempts last — then the requeuer dead-letters it and the item is
        // ABANDONED, like any retryable failure.
        (
            JobOutcome::Retryable,
            FailureKind::AttemptTimeout,
            "attempt timed out".to_owned(),
        )
    } else if let Some(why) = job_reason.strip_prefix(STATE_TIME_LIMIT) {
        // Before other cancels: the job queue's watchdog, not a person, cancelled it; capacity
        // may come back, a job no compute environment can place never will.
        let why = why.trim().to_owned();
        if why.starts_with("CAPACITY:") {
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
        }
    } else if is_cancellation(job_reason) || is_cancellation(status_reason) {
        // Before exit codes: a terminated job's container shows the 137 of its SIGKILL (published
        // event 14), which is the user's doing, not the application's (nor an out-of-memory kill).
        (
            JobOutcome::NonRetryable,
            FailureKind::Cancelled,
            format!("cancelled or terminated: {job_reason}"),
        )
    } else if let Some(code) = job.exit_code().filter(|c| *c != 0) {
        (
            JobOutcome::NonRetryable,
            FailureKind::ApplicationExit { exit_code: code },
            format!("application exited with code {code}"),
        )
    } else {
        let detail = if job_reason.is_empty() {
            "no status reason"
        } else {
            job_reason
        };
        (
            JobOutcome::NonRetryable,
            FailureKind::Unknown,
            format!("unrecognised failure: {detail}"),
        )
    };

    Ok(Classification {
        outcome,
        failure: Some(failure),
        batch_rules: explain_batch_rules(job),
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::batch_event::{AttemptContainer, EvaluateOnExit, JobAttempt, RetryStrategy};

    fn failed(
        status_reason: &str,
        container_reason: Option<&str>,
        exit_code: Option<i64>,
    ) -> JobDetail {
        JobDetail {
            job_name: "n".into(),
            job_id: "id".into(),
            job_queue: "q".into(),
            status: JobStatus::Failed,
            status_reason: Some(status_reason.into()),
            attempts: vec![JobAttempt {
                container: Some(AttemptContainer {
                    exit_code,
                    reason: container_reason.map(Into::into),
                    ..Default::default()
                }),
                status_reason: Some(status_reason.into()),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn route_of(job: &JobDetail) -> Route {
        classify(job).unwrap().route()
    }

    const SPOT: &str = "Host EC2 (instance i-0123456789abcdef0) terminated.";

    #[test]
    fn success() {
        let job = JobDetail {
            status: JobStatus::Succeeded,
            ..Default::default()
        };
        let c = classify(&job).unwrap();
        assert_eq!(c.outcome, JobOutcome::Success);
        assert_eq!(c.route(), Route::Done);
    }

    #[test]
    fn spot_is_retryable() {
        let c = classify(&failed(SPOT, None, None)).unwrap();
        assert_eq!(c.outcome, JobOutcome::Retryable);
        assert_eq!(c.failure, Some(FailureKind::SpotInterruption));
        assert_eq!(c.route(), Route::RetryQueue);
        // a Spot kill wins over whatever exit code the dying container left
        assert_eq!(route_of(&failed(SPOT, None, Some(137))), Route::RetryQueue);
    }

    #[test]
    fn spot_signature_is_exact() {
        assert!(is_spot_interruption(SPOT));
        assert!(!is_spot_interruption("Host EC2 (instance i-) terminated."));
        assert!(!is_spot_interruption(
            "Host EC2 (instance i-0abc) terminated"
        ));
        assert!(!is_spot_interruption(
            "Host EC2 (instance i-0 abc) terminated."
        ));
        assert!(!is_spot_interruption("Essential container in task exited"));
    }

    #[test]
    fn container_startup_errors_are_retryable() {
        for e in CONTAINER_STARTUP_ERRORS {
            let job = failed(
                "Essential container in task exited",
                Some(&format!("{e}: boom")),
                None,
            );
            let c = classify(&job).unwrap();
            assert_eq!(c.outcome, JobOutcome::Retryable, "{e}");
            assert_eq!(
                c.failure,
                Some(FailureKind::ContainerStartup {
                    error: e.to_owned()
                })
            );
        }
        let c = classify(&failed("Task failed to start", None, None)).unwrap();
        assert_eq!(c.outcome, JobOutcome::Retryable);
    }

    #[test]
    fn exit_codes_are_non_retryable() {
        let c = classify(&failed("Essential container in task exited", None, Some(1))).unwrap();
        assert_eq!(c.outcome, JobOutcome::NonRetryable);
        assert_eq!(
            c.failure,
            Some(FailureKind::ApplicationExit { exit_code: 1 })
        );
        assert_eq!(c.reason, "application exited with code 1");
        assert_eq!(c.route(), Route::FailureDlq);
    }

    #[test]
    fn a_timed_out_attempt_is_retried_by_granary() {
        let t = classify(&failed(
            "Job attempt duration exceeded timeout",
            None,
            Some(137),
        ))
        .unwrap();
        assert_eq!(t.failure, Some(FailureKind::AttemptTimeout));
        assert_eq!(t.outcome, JobOutcome::Retryable);
        assert_eq!(t.route(), Route::RetryQueue);
    }

    #[test]
    fn cancels_and_unknowns_are_non_retryable() {
        let mut cancelled = failed("", None, None);
        cancelled.status_reason = Some("Cancelled by operator".into());
        cancelled.attempts.clear();
        assert_eq!(
            classify(&cancelled).unwrap().failure,
            Some(FailureKind::Cancelled)
        );
        let unknown = classify(&failed("Something odd", None, Some(0))).unwrap();
        assert_eq!(unknown.failure, Some(FailureKind::Unknown));
        assert_eq!(unknown.outcome, JobOutcome::NonRetryable);
    }

    #[test]
    fn granarys_own_cancel_is_known_by_its_reason_and_routed_to_the_cancelled_list() {
        let reason = crate::domain::cancel::reason("c20261127T060001-000000ab", "bad image");
        // Terminated while running: the container shows the kill's 137, the attempt Batch's
        // own words; the job's reason is the terminator's.
        let mut running = failed("Essential container in task exited", None, Some(137));
        running.status_reason = Some(reason.clone());
        // Cancelled before it ran: no attempt at all.
        let mut queued = failed("", None, None);
        queued.status_reason = Some(reason);
        queued.attempts.clear();
        for job in [running, queued] {
            let c = classify(&job).unwrap();
            assert_eq!(
                c.failure,
                Some(FailureKind::GranaryCancel {
                    cancel: "c20261127T060001-000000ab".into()
                })
            );
            assert_eq!(c.route(), Route::Cancelled);
            assert!(c.reason.contains("bad image"), "{}", c.reason);
        }
        // Anyone else's cancel is still dead-lettered for a human.
        let mut by_hand = failed("", None, Some(137));
        by_hand.status_reason = Some("Terminated by the user".into());
        assert_eq!(classify(&by_hand).unwrap().route(), Route::FailureDlq);
    }

    #[test]
    fn the_queues_runnable_watchdog_retries_capacity_and_dead_letters_misconfiguration() {
        let stuck = |reason: &str| {
            let mut job = failed("", None, None);
            job.status_reason = Some(format!("{STATE_TIME_LIMIT}{reason}"));
            job.attempts.clear();
            classify(&job).unwrap()
        };
        let capacity = stuck("CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY");
        assert_eq!(capacity.outcome, JobOutcome::Retryable);
        assert_eq!(
            capacity.failure,
            Some(FailureKind::Capacity {
                reason: "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY".into()
            })
        );
        for reason in [
            "MISCONFIGURATION:COMPUTE_ENVIRONMENT_MAX_RESOURCE",
            "MISCONFIGURATION:JOB_RESOURCE_REQUIREMENT",
        ] {
            let c = stuck(reason);
            assert_eq!(c.outcome, JobOutcome::NonRetryable, "{reason}");
            assert!(matches!(
                c.failure,
                Some(FailureKind::Misconfiguration { .. })
            ));
            assert!(c.reason.contains(reason), "{}", c.reason);
        }
        // A person's cancel stays a cancel.
        let mut by_hand = failed("", None, None);
        by_hand.status_reason = Some("Canceled by the user".into());
        assert_eq!(
            classify(&by_hand).unwrap().failure,
            Some(FailureKind::Cancelled)
        );
    }

    #[test]
    fn non_terminal_is_an_error() {
        let job = JobDetail {
            status: JobStatus::Running,
            ..Default::default()
        };
        assert!(classify(&job).is_err());
    }

    #[test]
    fn a_failed_event_is_routed_whatever_the_retry_strategy_says() {
        let mut job = failed(SPOT, None, None);
        job.retry_strategy = Some(RetryStrategy {
            attempts: Some(3),
            evaluate_on_exit: vec![
                EvaluateOnExit {
                    on_status_reason: Some("Host EC2*".into()),
                    action: "RETRY".into(),
                    ..Default::default()
                },
                EvaluateOnExit {
                    on_reason: Some("*".into()),
                    action: "EXIT".into(),
                    ..Default::default()
                },
            ],
        });
        // A timed-out or terminated Spot job with attempts left and a RETRY rule is still FAILED:
        // Batch did not retry it, so granary must.
        let c = classify(&job).unwrap();
        assert_eq!(c.route(), Route::RetryQueue);
        assert!(
            c.batch_rules.contains("rule 0 says RETRY"),
            "{}",
            c.batch_rules
        );
        assert!(c.batch_rules.contains("1 of 3"), "{}", c.batch_rules);

        // application failure: rule 1 matches the reason and exits
        let mut app = failed("Essential container in task exited", Some("exit"), Some(2));
        app.retry_strategy = job.retry_strategy.clone();
        assert_eq!(route_of(&app), Route::FailureDlq);

        assert!(classify(&app)
            .unwrap()
            .batch_rules
            .contains("rule 1 says EXIT"));

        // third Spot kill: Batch's attempts are spent, so we retry it ourselves
        job.attempts = vec![job.attempts[0].clone(); 3];
        assert_eq!(route_of(&job), Route::RetryQueue);
        assert!(classify(&job).unwrap().batch_rules.contains("3 of 3"));
    }

    #[test]
    fn a_string_prefix_is_not_enough() {
        // A status reason merely *starting* like a Spot reason, under a rule that needs the exact text.
        let mut job = failed("Host EC2 (instance i-1) terminated. extra", None, None);
        job.retry_strategy = Some(RetryStrategy {
            attempts: Some(2),
            evaluate_on_exit: vec![
                EvaluateOnExit {
                    on_status_reason: Some("Host EC2 (instance i-1) terminated.".into()),
                    action: "RETRY".into(),
                    ..Default::default()
                },
                EvaluateOnExit {
                    on_status_reason: Some("*".into()),
                    action: "EXIT".into(),
                    ..Default::default()
                },
            ],
        });
        let rules = classify(&job).unwrap().batch_rules;
        assert!(rules.contains("rule 1 says EXIT"), "{rules}");
    }
}
