//! Realistic "Batch Job State Change" events, shaped like AWS Batch's (full JobDetail), for the
//! Batch simulator and for tests.

use serde_json::{json, Value};

mod describe;

pub use describe::describe_facts;

/// How one Batch attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptEnd {
    Success,
    /// Spot reclaim: no exit code, "Host EC2 (instance i-…) terminated."
    SpotInterruption {
        instance: String,
    },
    /// The application exited non-zero.
    AppFailure {
        exit_code: i64,
    },
    /// Killed at the job definition's attempt timeout.
    Timeout,
    /// The image could not be pulled.
    PullError,
}

impl AttemptEnd {
    /// (attempt statusReason, container reason, exit code) as Batch reports them.
    pub fn summary(&self) -> (String, Option<String>, Option<i64>) {
        let c = self.container("");
        (
            self.status_reason(),
            c.get("reason").and_then(|r| r.as_str()).map(str::to_owned),
            c.get("exitCode").and_then(|e| e.as_i64()),
        )
    }

    fn status_reason(&self) -> String {
        match self {
            AttemptEnd::Success | AttemptEnd::AppFailure { .. } => {
                "Essential container in task exited".into()
            }
            AttemptEnd::SpotInterruption { instance } => {
                format!("Host EC2 (instance {instance}) terminated.")
            }
            AttemptEnd::Timeout => "Job attempt duration exceeded timeout".into(),
            AttemptEnd::PullError => "Task failed to start".into(),
        }
    }

    fn container(&self, log_stream: &str) -> Value {
        let mut c = json!({
            "containerInstanceArn": "arn:aws:ecs:us-east-1:000000000000:container-instance/granary/0f1e2d3c",
            "taskArn": "arn:aws:ecs:us-east-1:000000000000:task/granary/9a8b7c6d",
            "logStreamName": log_stream,
            "networkInterfaces": []
        });
        match self {
            AttemptEnd::Success => c["exitCode"] = json!(0),
            AttemptEnd::AppFailure { exit_code } => c["exitCode"] = json!(exit_code),
            AttemptEnd::Timeout => c["exitCode"] = json!(137),
            AttemptEnd::PullError => {
                c["reason"] = json!("CannotPullContainerError: pull image manifest has been retried 5 time(s): failed to resolve ref")
            }
            AttemptEnd::SpotInterruption { .. } => {}
        }
        c
    }
}

/// What Batch knows about a job when it emits an event.
#[derive(Debug, Clone)]
pub struct JobFacts {
    pub job_id: String,
    pub job_name: String,
    pub job_arn: String,
    pub job_queue_arn: String,
    pub job_definition_arn: String,
    pub granule_id: String,
    pub attempt: u32,
    /// The job definition's retryStrategy, as JSON ({"attempts": n, "evaluateOnExit": [...]}).
    pub retry_strategy: Value,
    pub created_at_ms: i64,
    pub account: String,
    pub region: String,
    /// Its place in an array window, if it is one (then `granule_id` is the child's granule,
    /// read from the window claim as its container would, or empty for the parent).
    pub array: Option<ArrayPlace>,
    /// The campaign the job names (`campaign` parameter, `GRANARY_CAMPAIGN`), if any: its
    /// events carry it as Batch would (a child has its parent's parameters and environment).
    pub campaign: Option<String>,
}

/// Where a job stands in an array window (AWS Batch user guide, "Array jobs").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArrayPlace {
    /// The parent of `size` children.
    Parent { size: u32, window: WindowRef },
    /// Child `index` (its job id is the parent's with `:index`).
    Child { index: u32, window: WindowRef },
}

/// The window claim an array's jobs name: its key (the `window_claim` parameter) and where its
/// container reads it (the `GRANARY_WINDOW_CLAIM` variable).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowRef {
    pub claim_key: String,
    pub claim_uri: String,
    /// The claim's token (`window_token`), which every child carries as its parent does.
    pub token: Option<String>,
}

impl ArrayPlace {
    fn window(&self) -> &WindowRef {
        match self {
            ArrayPlace::Parent { window, .. } | ArrayPlace::Child { window, .. } => window,
        }
    }
}

/// What an array's jobs carry instead of a granule: the window claim and the attempt, in the
/// container environment and as parameters (`contracts::job::window_job_request`).
fn window_job_tags(window: &WindowRef, attempt: u32) -> (Value, Value) {
    (
        json!([
            {"name": "GRANARY_WINDOW_CLAIM", "value": window.claim_uri},
            {"name": "ATTEMPT", "value": attempt.to_string()}
        ]),
        match &window.token {
            Some(token) => json!({"window_claim": window.claim_key, "window_token": token,
                                  "attempt": attempt.to_string()}),
            None => json!({"window_claim": window.claim_key, "attempt": attempt.to_string()}),
        },
    )
}

/// The event Batch sends when an array window's parent ends, once every child has: SUCCEEDED
/// when all did, else FAILED with "Array Child Job failed" (as the published parent 12 says);
/// no attempts of its own, and its children counted by status in `arrayProperties`.
pub fn array_parent_event(facts: &JobFacts, succeeded: u32, failed: u32) -> Value {
    let Some(ArrayPlace::Parent { size, window }) = &facts.array else {
        return Value::Null;
    };
    let (environment, parameters) = window_job_tags(window, facts.attempt);
    let status = if failed == 0 { "SUCCEEDED" } else { "FAILED" };
    let mut detail = json!({
        "jobArn": facts.job_arn,
        "jobName": facts.job_name,
        "jobId": facts.job_id,
        "jobQueue": facts.job_queue_arn,
        "status": status,
        "attempts": [],
        "createdAt": facts.created_at_ms,
        "retryStrategy": facts.retry_strategy,
        "dependsOn": [],
        "jobDefinition": facts.job_definition_arn,
        "parameters": parameters,
        "container": {
            "image": "public.ecr.aws/docker/library/busybox:latest",
            "command": ["process-granule"],
            "environment": environment,
        },
        "arrayProperties": {
            "size": size,
            "statusSummary": {
                "SUCCEEDED": succeeded, "FAILED": failed, "RUNNING": 0, "RUNNABLE": 0,
                "STARTING": 0, "PENDING": 0, "SUBMITTED": 0
            }
        },
        "tags": {},
        "platformCapabilities": ["EC2"],
    });
    if failed > 0 {
        detail["statusReason"] = json!("Array Child Job failed");
    }
    json!({
        "version": "0",
        "id": format!("{}-array-{}", facts.job_id, status.to_lowercase()),
        "detail-type": "Batch Job State Change",
        "source": "aws.batch",
        "account": facts.account,
        "time": granary::clock::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "region": facts.region,
        "resources": [facts.job_arn],
        "detail": detail,
    })
}

/// The full event for a job whose attempts ended as `ends` (oldest first); `final_status` is
/// SUCCEEDED or FAILED, or RUNNABLE for the event Batch sends when it puts a job back in the queue
/// for another attempt (job states: a failed attempt with attempts left moves to RUNNABLE). A
/// RUNNABLE job has not stopped: no job-level stoppedAt, statusReason or exit code.
pub fn state_change_event(facts: &JobFacts, ends: &[AttemptEnd], final_status: &str) -> Value {
    let (attempts, stopped_at) = attempt_details(facts, ends);
    let last = ends.last().cloned().unwrap_or(AttemptEnd::Success);
    let last_container = attempts
        .last()
        .map(|a| a["container"].clone())
        .unwrap_or(json!({}));
    let container = job_container(facts, &last_container);
    let mut event = json!({
        "version": "0",
        "id": format!("{}-{}-{}", facts.job_id, ends.len(), final_status.to_lowercase()),
        "detail-type": "Batch Job State Change",
        "source": "aws.batch",
        "account": facts.account,
        "time": chrono::DateTime::from_timestamp_millis(stopped_at).unwrap_or_default().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "region": facts.region,
        "resources": [facts.job_arn],
        "detail": {
            "jobArn": facts.job_arn,
            "jobName": facts.job_name,
            "jobId": facts.job_id,
            "jobQueue": facts.job_queue_arn,
            "status": final_status,
            "statusReason": last.status_reason(),
            "attempts": attempts,
            "createdAt": facts.created_at_ms,
            "retryStrategy": facts.retry_strategy,
            "startedAt": facts.created_at_ms + 5_000,
            "stoppedAt": stopped_at,
            "dependsOn": [],
            "jobDefinition": facts.job_definition_arn,
            "parameters": {"granule_id": facts.granule_id, "attempt": facts.attempt.to_string()},
            "container": container,
            "timeout": {"attemptDurationSeconds": 3600},
            "tags": {},
            "propagateTags": false,
            "platformCapabilities": ["EC2"],
            "eksAttempts": []
        }
    });
    // An array's child names the window claim, not its granule, and its index.
    if let Some(place @ ArrayPlace::Child { index, .. }) = &facts.array {
        let (environment, parameters) = window_job_tags(place.window(), facts.attempt);
        event["detail"]["container"]["environment"] = environment;
        event["detail"]["parameters"] = parameters;
        event["detail"]["arrayProperties"] = json!({"index": index, "statusSummary": {}});
    }
    if let Some(campaign) = &facts.campaign {
        tag_campaign(&mut event["detail"], campaign);
    }
    if final_status == "RUNNABLE" {
        unstop(&mut event["detail"]);
    }
    event
}

/// The job's attempts, each a minute long, the first starting 5 s after the job was created; and
/// when the last one stopped.
fn attempt_details(facts: &JobFacts, ends: &[AttemptEnd]) -> (Vec<Value>, i64) {
    let mut t = facts.created_at_ms + 5_000;
    let attempts = ends
        .iter()
        .enumerate()
        .map(|(i, end)| {
            let started = t;
            t += 60_000;
            let stream = format!(
                "granary/default/{}-{i}",
                &facts.job_id.chars().take(8).collect::<String>()
            );
            json!({
                "container": end.container(&stream),
                "startedAt": started,
                "stoppedAt": t,
                "statusReason": end.status_reason(),
            })
        })
        .collect();
    (attempts, t)
}

/// The job-level container: the job definition's, with the granule's environment and the last
/// attempt's log stream, exit code and reason.
fn job_container(facts: &JobFacts, last_container: &Value) -> Value {
    let mut container = json!({
        "image": "public.ecr.aws/docker/library/busybox:latest",
        "command": ["process-granule"],
        "jobRoleArn": format!("arn:aws:iam::{}:role/granary-job", facts.account),
        "volumes": [], "mountPoints": [], "ulimits": [],
        "environment": [
            {"name": "GRANULE_ID", "value": facts.granule_id},
            {"name": "ATTEMPT", "value": facts.attempt.to_string()}
        ],
        "resourceRequirements": [{"type": "VCPU", "value": "1"}, {"type": "MEMORY", "value": "2048"}],
        "logStreamName": last_container["logStreamName"],
        "networkInterfaces": []
    });
    if let Some(code) = last_container.get("exitCode") {
        container["exitCode"] = code.clone();
    }
    if let Some(reason) = last_container.get("reason") {
        container["reason"] = reason.clone();
    }
    container
}

/// A job back in the queue has not stopped: no job-level statusReason, stoppedAt, exit code or
/// container reason.
fn unstop(detail: &mut Value) {
    if let Some(detail) = detail.as_object_mut() {
        detail.remove("statusReason");
        detail.remove("stoppedAt");
        if let Some(c) = detail.get_mut("container").and_then(Value::as_object_mut) {
            c.remove("exitCode");
            c.remove("reason");
        }
    }
}

/// A named campaign's job carries its name as a parameter and in its container's environment
/// (`contracts::job`).
fn tag_campaign(detail: &mut Value, campaign: &str) {
    if let Some(env) = detail["container"]["environment"].as_array_mut() {
        env.push(json!({"name": "GRANARY_CAMPAIGN", "value": campaign}));
    }
    if let Some(params) = detail["parameters"].as_object_mut() {
        params.insert("campaign".into(), json!(campaign));
    }
}

/// The retryStrategy granary's stack registers: Batch retries Spot and pull errors, `attempts` total.
pub fn default_retry_strategy(attempts: u32) -> Value {
    json!({
        "attempts": attempts,
        "evaluateOnExit": [
            {"onStatusReason": "Host EC2*", "action": "retry"},
            {"onReason": "CannotPullContainerError*", "action": "retry"},
            {"onExitCode": "66", "action": "retry"},
            {"onReason": "*", "action": "exit"}
        ]
    })
}

/// What a job works on (`job_work`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobWork {
    pub array: Option<ArrayPlace>,
    /// Empty for an array's parent.
    pub granule_id: String,
    pub attempt: u32,
    pub campaign: Option<String>,
}

/// What a job works on, from its parameters and environment (`lookup(parameter, variable)`)
/// and its array size: an array window's parent (its claim; its children are played from it,
/// so no granule), or a granule and attempt; and its campaign. `None`: the job carries
/// neither, so it is not granary's.
pub fn job_work(
    lookup: &dyn Fn(&str, &str) -> Option<String>,
    array_size: Option<u32>,
) -> Option<JobWork> {
    let array = match (
        lookup("window_claim", "-"),
        lookup("-", "GRANARY_WINDOW_CLAIM"),
        array_size,
    ) {
        (Some(claim_key), Some(claim_uri), Some(size)) => Some(ArrayPlace::Parent {
            size,
            window: WindowRef {
                claim_key,
                claim_uri,
                token: lookup("window_token", "-"),
            },
        }),
        _ => None,
    };
    let granule_id = match (&array, lookup("granule_id", "GRANULE_ID")) {
        (Some(_), _) => String::new(),
        (None, Some(granule_id)) => granule_id,
        (None, None) => return None,
    };
    let attempt = lookup("attempt", "ATTEMPT").and_then(|a| a.parse().ok())?;
    Some(JobWork {
        array,
        granule_id,
        attempt,
        campaign: lookup("campaign", "GRANARY_CAMPAIGN"),
    })
}

#[cfg(test)]
mod tests;
