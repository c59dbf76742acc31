use super::{describe, may_have_taken_effect, submit_job_retry_config};
use crate::domain::batch_event::JobStatus;
use crate::ports::{ActiveJobs, JobDescription, JobRequest, JobRunner, JobRunnerError, JobSummary};
use async_trait::async_trait;
use aws_sdk_batch::types::{
    ArrayProperties, ContainerOverrides, JobStatus as SdkStatus, KeyValuePair, KeyValuesPair,
};

/// AWS Batch bound to one job queue and job definition, and to the other queues granary's jobs
/// may be on (a last-attempt queue), which ListJobs is asked about too.
#[derive(Clone, Debug)]
pub struct BatchJobRunner {
    client: aws_sdk_batch::Client,
    job_queue: String,
    job_definition: String,
    other_queues: Vec<String>,
}

impl BatchJobRunner {
    pub fn new(
        client: aws_sdk_batch::Client,
        job_queue: impl Into<String>,
        job_definition: impl Into<String>,
    ) -> Self {
        Self {
            client,
            job_queue: job_queue.into(),
            job_definition: job_definition.into(),
            other_queues: Vec::new(),
        }
    }

    /// The same Batch, listing `queues` as well as its own (`config::Jobs::other_queues`).
    pub fn listing_also(self, queues: Vec<String>) -> Self {
        Self {
            other_queues: queues,
            ..self
        }
    }

    /// Every queue ListJobs is asked about: its own first.
    fn queues(&self) -> impl Iterator<Item = &String> {
        std::iter::once(&self.job_queue).chain(&self.other_queues)
    }
}

pub(crate) fn from_sdk_status(s: &SdkStatus) -> Option<JobStatus> {
    Some(match s {
        SdkStatus::Submitted => JobStatus::Submitted,
        SdkStatus::Pending => JobStatus::Pending,
        SdkStatus::Runnable => JobStatus::Runnable,
        SdkStatus::Starting => JobStatus::Starting,
        SdkStatus::Running => JobStatus::Running,
        SdkStatus::Succeeded => JobStatus::Succeeded,
        SdkStatus::Failed => JobStatus::Failed,
        _ => return None,
    })
}

/// DescribeJobs' JobDetail as the JSON the job-state-change event carries in `detail`: the event's
/// detail is "the same JobDetail DescribeJobs returns" (AWS Batch user guide, "Job state change
/// events"), so the monitor reads both with one parser. Only the fields granary reads are copied.
pub(crate) fn detail_json(j: &aws_sdk_batch::types::JobDetail) -> serde_json::Value {
    use serde_json::{json, Value};
    let attempts: Vec<Value> = j.attempts().iter().map(attempt_json).collect();
    let mut detail = json!({
        "jobArn": j.job_arn(),
        "jobName": j.job_name(),
        "jobId": j.job_id(),
        "jobQueue": j.job_queue(),
        "status": j.status().map(|s| s.as_str()),
        "statusReason": j.status_reason(),
        "attempts": attempts,
        "createdAt": j.created_at(),
        "startedAt": j.started_at(),
        "stoppedAt": j.stopped_at(),
        "jobDefinition": j.job_definition(),
        "parameters": j.parameters().cloned().unwrap_or_default(),
        "tags": j.tags().cloned().unwrap_or_default(),
        "timeout": j.timeout().map(|t| json!({ "attemptDurationSeconds": t.attempt_duration_seconds() })),
        // An array's child names its index here; the monitor reads its granule from it.
        "arrayProperties": j.array_properties().map(|a| json!({
            "size": a.size(),
            "index": a.index(),
            "statusSummary": a.status_summary().cloned().unwrap_or_default(),
        })),
    });
    if let (Some(obj), Some(c)) = (detail.as_object_mut(), j.container().map(container_json)) {
        obj.insert("container".into(), c);
    }
    if let (Some(obj), Some(r)) = (detail.as_object_mut(), j.retry_strategy().map(retry_json)) {
        obj.insert("retryStrategy".into(), r);
    }
    // Absent, not null: the parser treats a missing field and a null the same only where the
    // event itself may omit it.
    if let Some(obj) = detail.as_object_mut() {
        obj.retain(|_, v| !v.is_null());
    }
    detail
}

/// A container's end as the event's JSON has it.
fn container_reason(
    exit: Option<i32>,
    reason: Option<&str>,
    stream: Option<&str>,
) -> serde_json::Value {
    serde_json::json!({ "exitCode": exit, "reason": reason, "logStreamName": stream })
}

/// One of `attempts[]`: its container's (or its tasks' containers') end and its times.
fn attempt_json(a: &aws_sdk_batch::types::AttemptDetail) -> serde_json::Value {
    use serde_json::{json, Map, Value};
    let mut attempt = Map::new();
    if let Some(c) = a.container() {
        attempt.insert(
            "container".into(),
            container_reason(c.exit_code(), c.reason(), c.log_stream_name()),
        );
    }
    let tasks: Vec<Value> = a
        .task_properties()
        .iter()
        .map(|t| {
            let containers: Vec<Value> = t
                .containers()
                .iter()
                .map(|c| container_reason(c.exit_code(), c.reason(), c.log_stream_name()))
                .collect();
            json!({ "containers": containers })
        })
        .collect();
    attempt.insert("taskProperties".into(), Value::Array(tasks));
    attempt.insert("startedAt".into(), json!(a.started_at()));
    attempt.insert("stoppedAt".into(), json!(a.stopped_at()));
    attempt.insert("statusReason".into(), json!(a.status_reason()));
    Value::Object(attempt)
}

/// The job's `retryStrategy`, its rules as the event has them.
fn retry_json(r: &aws_sdk_batch::types::RetryStrategy) -> serde_json::Value {
    use serde_json::{json, Value};
    let rules: Vec<Value> = r
        .evaluate_on_exit()
        .iter()
        // Batch requires an action on every rule; one without cannot be evaluated.
        .filter_map(|e| {
            Some(json!({
                "onStatusReason": e.on_status_reason(),
                "onReason": e.on_reason(),
                "onExitCode": e.on_exit_code(),
                "action": e.action()?.as_str(),
            }))
        })
        .collect();
    json!({ "attempts": r.attempts(), "evaluateOnExit": rules })
}

/// The job's container: image, command, environment and its end.
fn container_json(c: &aws_sdk_batch::types::ContainerDetail) -> serde_json::Value {
    let environment: Vec<serde_json::Value> = c
        .environment()
        .iter()
        .filter_map(|kv| Some(serde_json::json!({ "name": kv.name()?, "value": kv.value()? })))
        .collect();
    // What the job reserved, as the event carries it: the cost report and memory-aware retries
    // read it from either.
    let requirements: Vec<serde_json::Value> = c
        .resource_requirements()
        .iter()
        .map(|r| serde_json::json!({ "type": r.r#type().map(|t| t.as_str()), "value": r.value() }))
        .collect();
    serde_json::json!({
        "image": c.image(),
        "resourceRequirements": requirements,
        "vcpus": c.vcpus(),
        "memory": c.memory(),
        "command": c.command(),
        "environment": environment,
        "exitCode": c.exit_code(),
        "reason": c.reason(),
        "logStreamName": c.log_stream_name(),
    })
}

#[async_trait]
impl JobRunner for BatchJobRunner {
    async fn submit(&self, request: JobRequest) -> Result<JobSummary, JobRunnerError> {
        let env = request
            .environment
            .iter()
            .map(|(k, v)| KeyValuePair::builder().name(k).value(v).build())
            .collect::<Vec<_>>();
        let out = self
            .client
            .submit_job()
            .job_name(&request.job_name)
            .job_queue(request.queue.as_deref().unwrap_or(&self.job_queue))
            .job_definition(&self.job_definition)
            .container_overrides(
                ContainerOverrides::builder()
                    .set_environment(Some(env))
                    // More memory than the job definition's (`domain::memory`): the override
                    // replaces its MEMORY requirement ("Override resource requirements", AWS
                    // Batch user guide; the older `memory` member cannot override it).
                    .set_resource_requirements(request.memory_mib.map(|mib| {
                        vec![aws_sdk_batch::types::ResourceRequirement::builder()
                            .r#type(aws_sdk_batch::types::ResourceType::Memory)
                            .value(mib.to_string())
                            .build()]
                    }))
                    .build(),
            )
            .set_parameters(Some(request.parameters.into_iter().collect()))
            .set_array_properties(request.array_size.map(|size| {
                ArrayProperties::builder()
                    .size(i32::try_from(size).unwrap_or(i32::MAX))
                    .build()
            }))
            // SubmitJob has no idempotency token: an SDK retry after a lost answer would create a
            // second job. One attempt only; granary decides what follows (see `state::submit_once`).
            .customize()
            .config_override(
                aws_sdk_batch::config::Builder::default().retry_config(submit_job_retry_config()),
            )
            .send()
            .await
            .map_err(|e| {
                JobRunnerError {
                    message: format!("SubmitJob {}: {}", request.job_name, describe(&e)),
                    may_have_taken_effect: may_have_taken_effect(&e),
                    source: None,
                }
                .with_source(e)
            })?;
        let job_id = out.job_id.ok_or_else(|| {
            JobRunnerError::ambiguous(format!(
                "SubmitJob {}: response has no job id",
                request.job_name
            ))
        })?;
        Ok(JobSummary {
            job_id,
            job_name: out.job_name.unwrap_or(request.job_name),
            status: JobStatus::Submitted,
        })
    }

    async fn count_active(&self, stop_at: u64) -> Result<ActiveJobs, JobRunnerError> {
        let mut active = ActiveJobs::default();
        let asked = self
            .queues()
            .flat_map(|q| JobStatus::ACTIVE.into_iter().map(move |s| (q, s)));
        for (queue, status) in asked {
            if active.total >= stop_at {
                break;
            }
            let mut pages = self
                .client
                .list_jobs()
                .job_queue(queue)
                .job_status(SdkStatus::from(status.as_str()))
                .into_paginator()
                .send();
            while let Some(page) = pages.next().await {
                let page = page.map_err(|e| {
                    JobRunnerError::refused(format!("ListJobs: {}", describe(&e))).with_source(e)
                })?;
                let listed = page.job_summary_list.unwrap_or_default();
                if status == JobStatus::Runnable {
                    for created in listed.iter().filter_map(|j| j.created_at) {
                        active.saw_runnable_created(created);
                    }
                }
                // ListJobs lists an array's parent, not its children (those only with
                // `arrayJobId`): a parent counts as its children not yet ended.
                for job in &listed {
                    for (child_status, n) in jobs_counted(job, status) {
                        *active.by_status.entry(child_status).or_default() += n;
                        active.total += n;
                    }
                }
                if active.total >= stop_at {
                    break;
                }
            }
        }
        Ok(active)
    }

    async fn find_by_name(&self, job_name: &str) -> Result<Option<JobSummary>, JobRunnerError> {
        let filter = KeyValuesPair::builder()
            .name("JOB_NAME")
            .values(job_name)
            .build();
        let mut newest: Option<(i64, JobSummary)> = None;
        for queue in self.queues() {
            let mut pages = self
                .client
                .list_jobs()
                .job_queue(queue)
                .filters(filter.clone())
                .into_paginator()
                .send();
            while let Some(page) = pages.next().await {
                let page = page.map_err(|e| {
                    JobRunnerError::refused(format!(
                        "ListJobs JOB_NAME={job_name}: {}",
                        describe(&e)
                    ))
                    .with_source(e)
                })?;
                // Batch's name filter is case-insensitive; our names are exact.
                let summaries = page.job_summary_list.unwrap_or_default();
                for j in summaries
                    .into_iter()
                    .filter(|j| j.job_name.as_deref() == Some(job_name))
                {
                    let (Some(job_id), Some(job_name)) = (j.job_id.clone(), j.job_name.clone())
                    else {
                        continue;
                    };
                    let Some(status) = j.status.as_ref().and_then(from_sdk_status) else {
                        continue;
                    };
                    let created = j.created_at.unwrap_or(0);
                    if newest.as_ref().is_none_or(|(c, _)| created >= *c) {
                        newest = Some((
                            created,
                            JobSummary {
                                job_id,
                                job_name,
                                status,
                            },
                        ));
                    }
                }
            }
        }
        Ok(newest.map(|(_, s)| s))
    }

    async fn terminate(&self, job_id: &str, reason: &str) -> Result<(), JobRunnerError> {
        // A second TerminateJob of the same job asks for what the first did (no second job can
        // come of it, unlike SubmitJob's), so the SDK's own retries stand here.
        self.client
            .terminate_job()
            .job_id(job_id)
            .reason(reason)
            .send()
            .await
            .map_err(|e| {
                JobRunnerError {
                    message: format!("TerminateJob {job_id}: {}", describe(&e)),
                    may_have_taken_effect: may_have_taken_effect(&e),
                    source: None,
                }
                .with_source(e)
            })?;
        Ok(())
    }

    async fn describe(&self, job_id: &str) -> Result<Option<JobDescription>, JobRunnerError> {
        Ok(self
            .describe_many(&[job_id.to_owned()])
            .await?
            .into_iter()
            .find(|d| d.summary.job_id == job_id))
    }

    async fn describe_many(
        &self,
        job_ids: &[String],
    ) -> Result<Vec<JobDescription>, JobRunnerError> {
        let mut found = Vec::with_capacity(job_ids.len());
        for chunk in job_ids.chunks(crate::ports::DESCRIBE_BATCH) {
            let out = self
                .client
                .describe_jobs()
                .set_jobs(Some(chunk.to_vec()))
                .send()
                .await
                .map_err(|e| {
                    JobRunnerError::refused(format!(
                        "DescribeJobs ({} jobs from {}): {}",
                        chunk.len(),
                        chunk[0],
                        describe(&e)
                    ))
                    .with_source(e)
                })?;
            found.extend(out.jobs.unwrap_or_default().iter().filter_map(|j| {
                Some(JobDescription {
                    summary: JobSummary {
                        status: j.status.as_ref().and_then(from_sdk_status)?,
                        job_id: j.job_id.clone()?,
                        job_name: j.job_name.clone()?,
                    },
                    detail: detail_json(j),
                })
            }));
        }
        Ok(found)
    }
}

/// The unfinished jobs a ListJobs entry listed under `listed_as` stands for, by status: itself;
/// nothing for an array's child (ListJobs is asked for the queue's jobs, which the parent
/// stands for; moto 5.2.5 lists children there too); or an unfinished array parent's children
/// not yet SUCCEEDED or FAILED. Those are counted by their own status from the parent's
/// `statusSummary`, and at least `size` less the ended ones, the rest under the parent's status:
/// the summary is updated on its own clock (`statusSummaryLastUpdatedAt`, ArrayPropertiesSummary,
/// AWS Batch API Reference) and may be empty or behind. An unfinished parent counts at least one.
/// A parent is only ever SUBMITTED, PENDING, SUCCEEDED or FAILED ("Array jobs", AWS Batch User
/// Guide), so each is counted once across the statuses listed.
fn jobs_counted(j: &aws_sdk_batch::types::JobSummary, listed_as: JobStatus) -> Vec<(String, u64)> {
    let listed = listed_as.as_str().to_owned();
    let Some(array) = j.array_properties() else {
        return vec![(listed, 1)];
    };
    if array.index().is_some() {
        return Vec::new();
    }
    let Some(size) = array.size() else {
        return vec![(listed, 1)];
    };
    let size = u64::try_from(size).unwrap_or(1);
    let summary = array.status_summary().cloned().unwrap_or_default();
    let of = |s: &str| u64::try_from(summary.get(s).copied().unwrap_or(0)).unwrap_or(0);
    let ended = of("SUCCEEDED") + of("FAILED");
    let mut out: Vec<(String, u64)> = JobStatus::ACTIVE
        .iter()
        .map(|s| (s.as_str().to_owned(), of(s.as_str())))
        .filter(|(_, n)| *n > 0)
        .collect();
    let summed: u64 = out.iter().map(|(_, n)| n).sum();
    let unfinished = size.saturating_sub(ended).max(1);
    if unfinished > summed {
        match out.iter_mut().find(|(s, _)| *s == listed) {
            Some((_, n)) => *n += unfinished - summed,
            None => out.push((listed, unfinished - summed)),
        }
    }
    out
}

/// Capability probe: does this endpoint have AWS Batch? Only an answer that the operation is not
/// implemented (HTTP 501, as LocalStack's free edition answers) means no; any other failure (the
/// endpoint down, bad credentials) is an error, never read as "no Batch". Real AWS always has it;
/// `granary status` asks so that it can still report on an emulator without Batch.
pub async fn endpoint_has_batch(client: &aws_sdk_batch::Client) -> Result<bool, JobRunnerError> {
    match client.describe_compute_environments().send().await {
        Ok(_) => Ok(true),
        Err(e) => {
            let status = e.raw_response().map(|r| r.status().as_u16());
            let text = aws_sdk_batch::error::DisplayErrorContext(&e)
                .to_string()
                .to_lowercase();
            if status == Some(501)
                || text.contains("not implemented")
                || text.contains("not yet been emulated")
            {
                Ok(false)
            } else {
                Err(JobRunnerError::refused(format!(
                    "asking the endpoint whether it has AWS Batch: {text}"
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests;
