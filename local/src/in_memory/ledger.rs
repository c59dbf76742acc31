//! What the Batch simulator asks of the Batch twin ([`JobLedger`]): the facts of new jobs, and
//! each job's settled end, kept in the twin's scratch file or in memory.

use super::batch::InMemoryBatch;
use super::jobs::{child_of, index_of, job_id_of, Child, DetailAt};
use super::{ACCOUNT, REGION};
use crate::events::JobFacts;
use crate::simulator::JobLedger;
use anyhow::{Context, Result};
use async_trait::async_trait;
use granary::domain::batch_event::JobStatus;
use serde_json::Value;

#[async_trait]
impl JobLedger for InMemoryBatch {
    async fn facts(&self, job_ids: &[String]) -> Result<Vec<JobFacts>> {
        let jobs = self.lock();
        let mut out = Vec::with_capacity(job_ids.len());
        for id in job_ids {
            let Some((_, job)) = jobs.get(id) else {
                continue;
            };
            // Settled jobs were seen already: the simulator asks only about new ones.
            let Some(request) = &job.request else {
                continue;
            };
            let lookup = |param: &str, var: &str| {
                request
                    .parameters
                    .get(param)
                    .or_else(|| request.environment.get(var))
                    .cloned()
            };
            // Jobs without granary's parameters are not ours, as with DescribeJobs.
            let Some(crate::events::JobWork {
                array,
                granule_id,
                attempt,
                campaign,
            }) = crate::events::job_work(&lookup, request.array_size)
            else {
                continue;
            };
            out.push(JobFacts {
                job_id: id.clone(),
                job_name: job.name.to_string(),
                job_arn: format!("arn:aws:batch:{REGION}:{ACCOUNT}:job/{id}"),
                job_queue_arn: self.job_queue_arn.clone(),
                job_definition_arn: self.job_definition_arn.clone(),
                granule_id,
                attempt,
                retry_strategy: self.retry_strategy.clone(),
                created_at_ms: job.created_at_ms,
                account: ACCOUNT.into(),
                region: REGION.into(),
                array,
                campaign,
            });
        }
        Ok(out)
    }

    async fn settle(&self, job_id: &str, status: JobStatus, detail: &Value) -> Result<()> {
        // Written and compressed before the jobs' lock is taken (DescribeJobs and SubmitJob wait
        // on it); the scratch file orders its own appends.
        let text = serde_json::to_vec(detail).context("the job detail as JSON")?;
        let spilled = match &self.scratch {
            Some(scratch) => Some(DetailAt(
                scratch
                    .append_framed(&text)
                    .context("the Batch twin's scratch file")?,
            )),
            None => None,
        };
        let mut jobs = self.lock();
        let held = match spilled {
            Some(at) => at,
            None => {
                jobs.held.push(text.into_boxed_slice());
                DetailAt(jobs.held.len() as u64 - 1)
            }
        };
        // A child is settled in its parent's list; the parent keeps its request for the children
        // not settled yet (DescribeJobs shows them queued).
        if let Some((parent, i)) = child_of(job_id) {
            let child = index_of(parent)
                .and_then(|p| jobs.all.get_mut(p))
                .and_then(|job| job.children.get_mut(i));
            if let Some(child) = child {
                *child = Child::new(status, held)?;
            }
            return Ok(());
        }
        let index = index_of(job_id);
        if let Some(job) = index.and_then(|i| jobs.all.get_mut(i)) {
            job.status = status;
            job.settled = Some(held);
            if job.children.iter().all(|c| c.settled().is_some()) {
                job.request = None;
            }
        }
        if let (true, Some(i)) = (status.is_terminal(), index) {
            jobs.active.remove(&i);
        }
        Ok(())
    }

    async fn finished(&self) -> Result<Vec<String>> {
        Ok(self
            .lock()
            .all
            .iter()
            .enumerate()
            .filter(|(_, j)| j.status.is_terminal())
            .map(|(i, _)| job_id_of(i))
            .collect())
    }

    async fn jobs(&self) -> Result<Vec<(String, String)>> {
        let mut all: Vec<(String, String)> = self
            .lock()
            .all
            .iter()
            .enumerate()
            .map(|(i, j)| (j.name.to_string(), job_id_of(i)))
            .collect();
        all.sort();
        Ok(all)
    }
}
