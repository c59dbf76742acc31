//! The EventBridge "Batch Job State Change" event. aws_lambda_events has no type for it, so the
//! detail (a full Batch JobDetail) is modelled here. Unknown fields are ignored and every field
//! Batch may omit is optional: a malformed event becomes an error value, never a panic.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const DETAIL_TYPE: &str = "Batch Job State Change";
pub const SOURCE: &str = "aws.batch";

/// The EventBridge envelope with a typed detail.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct BatchJobStateChange {
    #[serde(default)]
    pub version: Option<String>,
    #[serde(default)]
    pub id: Option<String>,
    pub detail_type: String,
    pub source: String,
    #[serde(default)]
    pub account: Option<String>,
    #[serde(default)]
    pub time: Option<String>,
    #[serde(default)]
    pub region: Option<String>,
    #[serde(default)]
    pub resources: Vec<String>,
    pub detail: JobDetail,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct JobDetail {
    #[serde(default)]
    pub job_arn: Option<String>,
    pub job_name: String,
    pub job_id: String,
    /// Every event and JobDetail has it; a ListJobs summary does not, and the rule already
    /// filters on it, so an absent queue is tolerated rather than rejected.
    #[serde(default)]
    pub job_queue: String,
    pub status: JobStatus,
    #[serde(default)]
    pub status_reason: Option<String>,
    #[serde(default)]
    pub attempts: Vec<JobAttempt>,
    /// Epoch milliseconds, as Batch reports them.
    #[serde(default)]
    pub created_at: Option<i64>,
    #[serde(default)]
    pub started_at: Option<i64>,
    #[serde(default)]
    pub stopped_at: Option<i64>,
    #[serde(default)]
    pub retry_strategy: Option<RetryStrategy>,
    #[serde(default)]
    pub job_definition: Option<String>,
    #[serde(default)]
    pub parameters: BTreeMap<String, String>,
    #[serde(default)]
    pub container: Option<ContainerDetail>,
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    #[serde(default)]
    pub timeout: Option<JobTimeout>,
    /// Present on array jobs only: `size` on the parent, `index` on each child (whose job id is
    /// the parent's with `:index` appended). AWS Batch API Reference, ArrayPropertiesDetail.
    #[serde(default)]
    pub array_properties: Option<ArrayProperties>,
}

/// An array job's place: the parent has `size` (2 to 10,000) and a `statusSummary` of its
/// children; a child has its `index` (AWS Batch user guide, "Array jobs").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ArrayProperties {
    #[serde(default)]
    pub size: Option<u32>,
    #[serde(default)]
    pub index: Option<u32>,
    #[serde(default)]
    pub status_summary: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobStatus {
    #[default]
    Submitted,
    Pending,
    Runnable,
    Starting,
    Running,
    Succeeded,
    Failed,
}

impl JobStatus {
    pub const ACTIVE: [JobStatus; 5] = [
        JobStatus::Submitted,
        JobStatus::Pending,
        JobStatus::Runnable,
        JobStatus::Starting,
        JobStatus::Running,
    ];

    /// Every status, in the order a job moves through them.
    pub const ALL: [JobStatus; 7] = [
        JobStatus::Submitted,
        JobStatus::Pending,
        JobStatus::Runnable,
        JobStatus::Starting,
        JobStatus::Running,
        JobStatus::Succeeded,
        JobStatus::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Submitted => "SUBMITTED",
            JobStatus::Pending => "PENDING",
            JobStatus::Runnable => "RUNNABLE",
            JobStatus::Starting => "STARTING",
            JobStatus::Running => "RUNNING",
            JobStatus::Succeeded => "SUCCEEDED",
            JobStatus::Failed => "FAILED",
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, JobStatus::Succeeded | JobStatus::Failed)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct JobAttempt {
    #[serde(default)]
    pub container: Option<AttemptContainer>,
    /// ECS-properties and multi-node jobs report the exit code here, not under `container`.
    #[serde(default)]
    pub exit_code: Option<i64>,
    /// ECS-properties jobs: one entry per task, each with its containers' exit codes and reasons.
    #[serde(default)]
    pub task_properties: Vec<AttemptTaskProperties>,
    #[serde(default)]
    pub started_at: Option<i64>,
    #[serde(default)]
    pub stopped_at: Option<i64>,
    #[serde(default)]
    pub status_reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct AttemptTaskProperties {
    #[serde(default)]
    pub containers: Vec<AttemptContainer>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct AttemptContainer {
    #[serde(default)]
    pub container_instance_arn: Option<String>,
    #[serde(default)]
    pub task_arn: Option<String>,
    #[serde(default)]
    pub exit_code: Option<i64>,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub log_stream_name: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ContainerDetail {
    #[serde(default)]
    pub image: Option<String>,
    #[serde(default)]
    pub command: Vec<String>,
    #[serde(default)]
    pub environment: Vec<KeyValue>,
    #[serde(default)]
    pub exit_code: Option<i64>,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub log_stream_name: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct KeyValue {
    pub name: String,
    #[serde(default)]
    pub value: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct JobTimeout {
    #[serde(default)]
    pub attempt_duration_seconds: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct RetryStrategy {
    #[serde(default)]
    pub attempts: Option<u32>,
    #[serde(default)]
    pub evaluate_on_exit: Vec<EvaluateOnExit>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct EvaluateOnExit {
    #[serde(default)]
    pub on_status_reason: Option<String>,
    #[serde(default)]
    pub on_reason: Option<String>,
    #[serde(default)]
    pub on_exit_code: Option<String>,
    pub action: String,
}

#[derive(Debug, thiserror::Error)]
pub enum BatchEventError {
    #[error("not a JSON Batch job state change event: {0}")]
    Malformed(#[from] serde_json::Error),
    #[error("unexpected event: source {event_source:?}, detail-type {detail_type:?}")]
    WrongKind {
        event_source: String,
        detail_type: String,
    },
}

impl BatchJobStateChange {
    pub fn parse(json: &str) -> Result<Self, BatchEventError> {
        Self::from_value(&serde_json::from_str(json)?)
    }

    pub fn from_value(value: &serde_json::Value) -> Result<Self, BatchEventError> {
        // Read in place: the caller keeps the event (the monitor logs its detail as it came).
        let event = Self::deserialize(value)?;
        if event.detail_type != DETAIL_TYPE || event.source != SOURCE {
            return Err(BatchEventError::WrongKind {
                event_source: event.source,
                detail_type: event.detail_type,
            });
        }
        Ok(event)
    }
}

impl JobDetail {
    /// A container environment variable, as set at submit time by granary.
    pub fn env(&self, name: &str) -> Option<&str> {
        self.container
            .as_ref()?
            .environment
            .iter()
            .find(|kv| kv.name == name)
            .map(|kv| kv.value.as_str())
    }

    pub fn last_attempt(&self) -> Option<&JobAttempt> {
        self.attempts.last()
    }

    /// The containers of the last attempt: `container` for classic jobs, every container of every
    /// task for ECS-properties jobs (which have no `container`; see the published events 01, 15).
    fn last_attempt_containers(&self) -> impl Iterator<Item = &AttemptContainer> {
        self.last_attempt().into_iter().flat_map(|a| {
            a.container
                .iter()
                .chain(a.task_properties.iter().flat_map(|t| t.containers.iter()))
        })
    }

    /// The exit code of the last attempt — its container's, the attempt's own (multi-node and
    /// ECS-properties jobs), the first non-zero of its task containers — falling back to the job's
    /// container. Meaningful only for a finished job: a running one may show 0.
    pub fn exit_code(&self) -> Option<i64> {
        let codes: Vec<i64> = self
            .last_attempt_containers()
            .filter_map(|c| c.exit_code)
            .collect();
        self.last_attempt()
            .and_then(|a| {
                a.container
                    .as_ref()
                    .and_then(|c| c.exit_code)
                    .or(a.exit_code)
            })
            .or_else(|| {
                codes
                    .iter()
                    .copied()
                    .find(|c| *c != 0)
                    .or(codes.first().copied())
            })
            .or_else(|| self.container.as_ref().and_then(|c| c.exit_code))
    }

    /// The container-level reason (e.g. "CannotPullContainerError: ...") of the last attempt.
    pub fn container_reason(&self) -> Option<&str> {
        self.last_attempt_containers()
            .find_map(|c| c.reason.as_deref())
            .or_else(|| self.container.as_ref().and_then(|c| c.reason.as_deref()))
    }

    /// The attempt-level status reason, falling back to the job's.
    pub fn attempt_status_reason(&self) -> Option<&str> {
        self.last_attempt()
            .and_then(|a| a.status_reason.as_deref())
            .or(self.status_reason.as_deref())
    }

    pub fn log_stream_name(&self) -> Option<&str> {
        self.last_attempt()
            .and_then(|a| a.container.as_ref())
            .and_then(|c| c.log_stream_name.as_deref())
            .or_else(|| {
                self.container
                    .as_ref()
                    .and_then(|c| c.log_stream_name.as_deref())
            })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn sample_event_json() -> &'static str {
        r#"{
          "version": "0", "id": "c8f9c4b5-76e5-d76a-f980-7011e206042b",
          "detail-type": "Batch Job State Change", "source": "aws.batch",
          "account": "123456789012", "time": "2022-01-11T23:36:40Z", "region": "us-east-1",
          "resources": ["arn:aws:batch:us-east-1:123456789012:job/4c7599ae-0a82-49aa-ba5a-4727fcce14a8"],
          "detail": {
            "jobArn": "arn:aws:batch:us-east-1:123456789012:job/4c7599ae-0a82-49aa-ba5a-4727fcce14a8",
            "jobName": "HLS_S30_T01GBH_2022226T214921_v2_0-a1-0123abcd",
            "jobId": "4c7599ae-0a82-49aa-ba5a-4727fcce14a8",
            "jobQueue": "arn:aws:batch:us-east-1:123456789012:job-queue/granary",
            "status": "FAILED",
            "statusReason": "Host EC2 (instance i-0123456789abcdef0) terminated.",
            "attempts": [{
              "container": {"containerInstanceArn": "arn:x", "taskArn": "arn:y",
                            "logStreamName": "granary/default/abc", "networkInterfaces": []},
              "startedAt": 1641944100000, "stoppedAt": 1641944200000,
              "statusReason": "Host EC2 (instance i-0123456789abcdef0) terminated."
            }],
            "createdAt": 1641944000000, "retryStrategy": {"attempts": 1, "evaluateOnExit": []},
            "startedAt": 1641944100000, "stoppedAt": 1641944200000, "dependsOn": [],
            "jobDefinition": "arn:aws:batch:us-east-1:123456789012:job-definition/granary:1",
            "parameters": {}, "platformCapabilities": ["EC2"], "propagateTags": false,
            "container": {"image": "busybox", "command": ["run"], "vcpus": 1, "memory": 2048,
              "environment": [{"name": "GRANULE_ID", "value": "HLS.S30.T01GBH.2022226T214921.v2.0"},
                              {"name": "ATTEMPT", "value": "1"}],
              "mountPoints": [], "ulimits": [], "resourceRequirements": []},
            "tags": {"resourceArn": "arn:z"}, "someFutureField": {"nested": true}
          }
        }"#
    }

    #[test]
    fn parses_a_full_event_and_ignores_unknown_fields() {
        let e = BatchJobStateChange::parse(sample_event_json()).unwrap();
        assert_eq!(e.detail.status, JobStatus::Failed);
        assert_eq!(
            e.detail.env("GRANULE_ID"),
            Some("HLS.S30.T01GBH.2022226T214921.v2.0")
        );
        assert_eq!(e.detail.env("ATTEMPT"), Some("1"));
        assert_eq!(e.detail.exit_code(), None);
        assert_eq!(e.detail.log_stream_name(), Some("granary/default/abc"));
        assert_eq!(
            e.detail.retry_strategy.as_ref().and_then(|r| r.attempts),
            Some(1)
        );
    }

    #[test]
    fn minimal_event_parses() {
        let json = r#"{"detail-type":"Batch Job State Change","source":"aws.batch",
            "detail":{"jobName":"n","jobId":"i","jobQueue":"q","status":"SUCCEEDED"}}"#;
        let e = BatchJobStateChange::parse(json).unwrap();
        assert_eq!(e.detail.status, JobStatus::Succeeded);
        assert!(e.detail.attempts.is_empty());
    }

    #[test]
    fn malformed_events_are_errors() {
        assert!(matches!(
            BatchJobStateChange::parse("{"),
            Err(BatchEventError::Malformed(_))
        ));
        assert!(matches!(
            BatchJobStateChange::parse("[]"),
            Err(BatchEventError::Malformed(_))
        ));
        let no_status = r#"{"detail-type":"Batch Job State Change","source":"aws.batch",
            "detail":{"jobName":"n","jobId":"i","jobQueue":"q"}}"#;
        assert!(BatchJobStateChange::parse(no_status).is_err());
        let bad_status = r#"{"detail-type":"Batch Job State Change","source":"aws.batch",
            "detail":{"jobName":"n","jobId":"i","jobQueue":"q","status":"EXPLODED"}}"#;
        assert!(BatchJobStateChange::parse(bad_status).is_err());
        let wrong = r#"{"detail-type":"EC2 Instance State-change Notification","source":"aws.ec2",
            "detail":{"jobName":"n","jobId":"i","jobQueue":"q","status":"FAILED"}}"#;
        assert!(matches!(
            BatchJobStateChange::parse(wrong),
            Err(BatchEventError::WrongKind { .. })
        ));
    }
}
