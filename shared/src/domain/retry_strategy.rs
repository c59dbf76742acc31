//! AWS Batch's own retry decision, evaluated exactly as Batch documents it. The local Batch
//! simulator decides with it whether a failed attempt goes back to RUNNABLE; the monitor only
//! quotes it (`explain_batch_rules`) — a FAILED event is final whatever the rules say.
//!
//! Rules: a failed attempt is retried only while attempts used < `attempts`. The `evaluateOnExit`
//! entries are checked in order and the first whose every given condition matches decides (RETRY or
//! EXIT, case-insensitive). When none matches, or there are none, Batch retries. A pattern matches
//! exactly, or as a prefix when it ends with `*`. A value the attempt lacks (no container reason,
//! no exit code after a Spot kill) is matched as the empty string, so `*` still matches it — which
//! is what makes AWS's documented catch-all `{"onReason": "*", "action": "EXIT"}` work.

use super::batch_event::{EvaluateOnExit, JobDetail, RetryStrategy};

/// The decision Batch makes for the last attempt of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchRetryDecision {
    /// Batch will start another attempt; the job is not finished.
    WillRetry { rule: Option<usize> },
    /// No attempts left or an EXIT rule matched.
    Exit { why: String },
}

/// Batch's glob: exact match, or prefix match when the pattern ends with `*`.
pub fn batch_glob_matches(pattern: &str, value: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => value.starts_with(prefix),
        None => pattern == value,
    }
}

fn condition_matches(pattern: Option<&str>, value: Option<&str>) -> bool {
    match (pattern, value) {
        (None, _) => true,
        (Some(p), v) => batch_glob_matches(p, v.unwrap_or("")),
    }
}

impl EvaluateOnExit {
    pub fn matches(
        &self,
        status_reason: Option<&str>,
        reason: Option<&str>,
        exit_code: Option<i64>,
    ) -> bool {
        let exit = exit_code.map(|c| c.to_string());
        condition_matches(self.on_status_reason.as_deref(), status_reason)
            && condition_matches(self.on_reason.as_deref(), reason)
            && condition_matches(self.on_exit_code.as_deref(), exit.as_deref())
    }

    pub fn is_retry(&self) -> bool {
        self.action.eq_ignore_ascii_case("RETRY")
    }
}

impl RetryStrategy {
    /// Batch's decision for a job whose `attempts_used` attempts have run, the last one ending with
    /// the given status reason, container reason and exit code.
    pub fn decide(
        &self,
        attempts_used: usize,
        status_reason: Option<&str>,
        reason: Option<&str>,
        exit_code: Option<i64>,
    ) -> BatchRetryDecision {
        let allowed = self.attempts.unwrap_or(1).max(1) as usize;
        if attempts_used >= allowed {
            return BatchRetryDecision::Exit {
                why: format!("{attempts_used} of {allowed} Batch attempts used"),
            };
        }
        for (i, rule) in self.evaluate_on_exit.iter().enumerate() {
            if rule.matches(status_reason, reason, exit_code) {
                return if rule.is_retry() {
                    BatchRetryDecision::WillRetry { rule: Some(i) }
                } else {
                    BatchRetryDecision::Exit {
                        why: format!("evaluateOnExit rule {i} says {}", rule.action),
                    }
                };
            }
        }
        BatchRetryDecision::WillRetry { rule: None }
    }
}

/// Batch's decision for the job in a FAILED event. No retry strategy means one attempt.
pub fn batch_retry_decision(job: &JobDetail) -> BatchRetryDecision {
    let strategy = job.retry_strategy.clone().unwrap_or_default();
    strategy.decide(
        job.attempts.len().max(1),
        job.attempt_status_reason(),
        job.container_reason(),
        job.exit_code(),
    )
}

/// How the job's retry strategy reads on its last attempt, for the log and `granary classify`.
pub fn explain_batch_rules(job: &JobDetail) -> String {
    let strategy = job.retry_strategy.clone().unwrap_or_default();
    let allowed = strategy.attempts.unwrap_or(1).max(1);
    let used = job.attempts.len();
    let prefix = format!("{used} of {allowed} Batch attempts used");
    if job.status == super::batch_event::JobStatus::Succeeded {
        return prefix;
    }
    match batch_retry_decision(job) {
        BatchRetryDecision::Exit { why } if why.starts_with("evaluateOnExit") => {
            format!("{prefix}; {why}")
        }
        BatchRetryDecision::Exit { .. } => format!("{prefix}; Batch's retries are spent"),
        BatchRetryDecision::WillRetry { rule } => {
            let rule = match rule {
                Some(i) => format!("evaluateOnExit rule {i} says RETRY"),
                None => "no evaluateOnExit rule matched (Batch's default is RETRY)".to_owned(),
            };
            format!(
                "{prefix}; {rule}, yet the job FAILED: Batch does not retry a job that timed out or \
                 was terminated or cancelled"
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(sr: Option<&str>, r: Option<&str>, ec: Option<&str>, action: &str) -> EvaluateOnExit {
        EvaluateOnExit {
            on_status_reason: sr.map(str::to_owned),
            on_reason: r.map(str::to_owned),
            on_exit_code: ec.map(str::to_owned),
            action: action.to_owned(),
        }
    }

    fn strategy(attempts: u32, rules: Vec<EvaluateOnExit>) -> RetryStrategy {
        RetryStrategy {
            attempts: Some(attempts),
            evaluate_on_exit: rules,
        }
    }

    const SPOT: &str = "Host EC2 (instance i-0abc) terminated.";

    #[test]
    fn glob_is_exact_or_trailing_star_prefix() {
        assert!(batch_glob_matches("Host EC2*", SPOT));
        assert!(!batch_glob_matches("Host EC2", SPOT));
        assert!(batch_glob_matches(SPOT, SPOT));
        assert!(batch_glob_matches("*", "anything"));
        assert!(batch_glob_matches("*", ""));
        assert!(
            !batch_glob_matches("host ec2*", SPOT),
            "patterns are case-sensitive"
        );
        // only a trailing star is a wildcard
        assert!(!batch_glob_matches("Host*terminated.", SPOT));
        assert!(batch_glob_matches("1*", "137"));
        assert!(!batch_glob_matches("1*", "0"));
    }

    #[test]
    fn no_attempts_left_means_exit() {
        let s = strategy(3, vec![rule(Some("Host EC2*"), None, None, "RETRY")]);
        assert!(matches!(
            s.decide(3, Some(SPOT), None, None),
            BatchRetryDecision::Exit { .. }
        ));
        assert!(matches!(
            s.decide(4, Some(SPOT), None, None),
            BatchRetryDecision::Exit { .. }
        ));
        assert_eq!(
            s.decide(2, Some(SPOT), None, None),
            BatchRetryDecision::WillRetry { rule: Some(0) }
        );
    }

    #[test]
    fn default_strategy_is_one_attempt() {
        let s = RetryStrategy::default();
        assert!(matches!(
            s.decide(1, Some(SPOT), None, None),
            BatchRetryDecision::Exit { .. }
        ));
    }

    #[test]
    fn first_matching_rule_wins() {
        let s = strategy(
            3,
            vec![
                rule(Some("Host EC2*"), None, None, "retry"),
                rule(None, None, Some("*"), "EXIT"),
                rule(Some("*"), None, None, "RETRY"),
            ],
        );
        assert_eq!(
            s.decide(1, Some(SPOT), None, None),
            BatchRetryDecision::WillRetry { rule: Some(0) }
        );
        assert!(matches!(
            s.decide(1, Some("Essential container in task exited"), None, Some(1)),
            BatchRetryDecision::Exit { .. }
        ));
        // no exit code is the empty string: "*" matches it, so rule 1 exits
        assert!(matches!(
            s.decide(1, Some("Task failed to start"), None, None),
            BatchRetryDecision::Exit { .. }
        ));
        // but a specific exit-code pattern does not match a missing exit code
        let specific = strategy(2, vec![rule(None, None, Some("1*"), "EXIT")]);
        assert_eq!(
            specific.decide(1, Some(SPOT), None, None),
            BatchRetryDecision::WillRetry { rule: None }
        );
    }

    #[test]
    fn all_conditions_of_a_rule_must_match() {
        let s = strategy(
            2,
            vec![
                rule(Some("Essential*"), Some("CannotPull*"), None, "RETRY"),
                rule(Some("*"), None, None, "EXIT"),
            ],
        );
        assert!(matches!(
            s.decide(1, Some("Essential container"), None, None),
            BatchRetryDecision::Exit { .. }
        ));
        assert_eq!(
            s.decide(
                1,
                Some("Essential container"),
                Some("CannotPullContainerError: x"),
                None
            ),
            BatchRetryDecision::WillRetry { rule: Some(0) }
        );
    }

    #[test]
    fn no_matching_rule_means_retry() {
        let s = strategy(2, vec![rule(Some("Host EC2*"), None, None, "EXIT")]);
        assert_eq!(
            s.decide(1, Some("something else"), None, Some(2)),
            BatchRetryDecision::WillRetry { rule: None }
        );
        let empty = strategy(2, vec![]);
        assert_eq!(
            empty.decide(1, None, None, Some(1)),
            BatchRetryDecision::WillRetry { rule: None }
        );
    }
}
