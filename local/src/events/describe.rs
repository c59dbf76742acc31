//! What Batch itself says about jobs (DescribeJobs), read as [`JobFacts`].

use super::{job_work, JobFacts, JobWork};
use anyhow::Context;
use aws_sdk_batch::types::{JobDetail, RetryStrategy};
use serde_json::{json, Value};
use std::collections::HashMap;

/// Reads what Batch knows about jobs (DescribeJobs, 100 ids a call) as [`JobFacts`]. Jobs without
/// granary's granule_id/attempt parameters are skipped: they are not ours.
pub async fn describe_facts(
    batch: &aws_sdk_batch::Client,
    job_ids: &[String],
) -> anyhow::Result<Vec<JobFacts>> {
    let mut out = Vec::with_capacity(job_ids.len());
    // A job inherits its definition's retryStrategy; not every Batch (moto) echoes it per job.
    let mut definitions: HashMap<String, Option<RetryStrategy>> = HashMap::new();
    for chunk in job_ids.chunks(100) {
        let resp = batch
            .describe_jobs()
            .set_jobs(Some(chunk.to_vec()))
            .send()
            .await
            .context("DescribeJobs")?;
        for j in resp.jobs.unwrap_or_default() {
            let Some(JobWork {
                array,
                granule_id,
                attempt,
                campaign,
            }) = work_of(&j)
            else {
                continue;
            };
            let (Some(job_id), Some(job_name), Some(job_arn)) =
                (j.job_id.clone(), j.job_name.clone(), j.job_arn.clone())
            else {
                continue;
            };
            let (region, account) = region_and_account(&job_arn);
            let retry_strategy = job_retry_strategy(batch, &j, &mut definitions).await?;
            out.push(JobFacts {
                job_id,
                job_name,
                job_arn,
                job_queue_arn: j.job_queue.clone().unwrap_or_default(),
                job_definition_arn: j.job_definition.clone().unwrap_or_default(),
                granule_id,
                attempt,
                retry_strategy: retry_strategy_json(retry_strategy.as_ref()),
                created_at_ms: j
                    .created_at
                    .unwrap_or_else(|| granary::clock::now().timestamp_millis()),
                account,
                region,
                array,
                campaign,
            });
        }
    }
    Ok(out)
}

/// What job `j` works on, from its parameters and container environment ([`job_work`]).
fn work_of(j: &JobDetail) -> Option<JobWork> {
    let params = j.parameters.clone().unwrap_or_default();
    let env: Vec<(String, String)> = j
        .container
        .as_ref()
        .and_then(|c| c.environment.clone())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|kv| Some((kv.name?, kv.value?)))
        .collect();
    let lookup = |param: &str, var: &str| {
        params
            .get(param)
            .cloned()
            .or_else(|| env.iter().find(|(k, _)| k == var).map(|(_, v)| v.clone()))
    };
    let size = j
        .array_properties
        .as_ref()
        .and_then(|a| a.size)
        .and_then(|n| u32::try_from(n).ok());
    job_work(&lookup, size)
}

/// The region and account a job's ARN names (arn:aws:batch:REGION:ACCOUNT:job/ID).
fn region_and_account(job_arn: &str) -> (String, String) {
    let parts: Vec<&str> = job_arn.split(':').collect();
    let region = parts.get(3).copied().unwrap_or("us-east-1").to_owned();
    let account = parts.get(4).copied().unwrap_or("000000000000").to_owned();
    (region, account)
}

/// Job `j`'s retryStrategy: its own, else its definition's (asked once per definition, then
/// remembered in `definitions`).
async fn job_retry_strategy(
    batch: &aws_sdk_batch::Client,
    j: &JobDetail,
    definitions: &mut HashMap<String, Option<RetryStrategy>>,
) -> anyhow::Result<Option<RetryStrategy>> {
    Ok(match j.retry_strategy.as_ref() {
        Some(r) => Some(r.clone()),
        None => match j.job_definition.as_deref() {
            Some(def) => match definitions.get(def) {
                Some(cached) => cached.clone(),
                None => {
                    let found = definition_retry_strategy(batch, def).await?;
                    definitions.insert(def.to_owned(), found.clone());
                    found
                }
            },
            None => None,
        },
    })
}

/// A retryStrategy as the event's JSON says it; one attempt and no rules when there is none.
fn retry_strategy_json(retry_strategy: Option<&RetryStrategy>) -> Value {
    retry_strategy
        .map(|r| {
            json!({
                "attempts": r.attempts.unwrap_or(1),
                "evaluateOnExit": r.evaluate_on_exit.clone().unwrap_or_default().iter().map(|e| {
                    let mut v = json!({"action": e.action.as_ref().map(|a| a.as_str().to_lowercase()).unwrap_or_default()});
                    if let Some(s) = &e.on_status_reason { v["onStatusReason"] = json!(s); }
                    if let Some(s) = &e.on_reason { v["onReason"] = json!(s); }
                    if let Some(s) = &e.on_exit_code { v["onExitCode"] = json!(s); }
                    v
                }).collect::<Vec<_>>()
            })
        })
        .unwrap_or_else(|| json!({"attempts": 1, "evaluateOnExit": []}))
}

async fn definition_retry_strategy(
    batch: &aws_sdk_batch::Client,
    definition: &str,
) -> anyhow::Result<Option<RetryStrategy>> {
    let resp = batch
        .describe_job_definitions()
        .job_definitions(definition)
        .send()
        .await
        .with_context(|| format!("DescribeJobDefinitions {definition}"))?;
    Ok(resp
        .job_definitions
        .unwrap_or_default()
        .into_iter()
        .find_map(|d| d.retry_strategy))
}
