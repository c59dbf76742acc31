//! The Batch the simulator stands beside, as it reads and settles jobs: the emulator's, over
//! its endpoint (the in-memory twin implements the same trait).

use crate::events::{describe_facts, JobFacts};
use anyhow::{Context, Result};
use async_trait::async_trait;
use aws_sdk_batch::types::JobStatus;

/// What the simulator reads about jobs from the Batch it stands beside.
#[async_trait]
pub trait JobLedger: Send + Sync {
    /// What Batch knows about these jobs; ids without granary's parameters are skipped.
    async fn facts(&self, job_ids: &[String]) -> Result<Vec<JobFacts>>;
    /// The simulator decided how the job ended: what DescribeJobs answers from now on. An
    /// emulator's Batch keeps its own record of the job, which the simulator cannot change.
    async fn settle(
        &self,
        job_id: &str,
        status: granary::domain::batch_event::JobStatus,
        detail: &serde_json::Value,
    ) -> Result<()>;
    /// Every finished job on the job queue (for the settling sweep).
    async fn finished(&self) -> Result<Vec<String>>;
    /// Every job on the job queue in any status, as (name, id), sorted.
    async fn jobs(&self) -> Result<Vec<(String, String)>>;
}

/// The emulator's (or any endpoint's) Batch: DescribeJobs and ListJobs.
pub struct EndpointBatch {
    batch: aws_sdk_batch::Client,
    job_queue: String,
}

impl EndpointBatch {
    pub fn new(batch: aws_sdk_batch::Client, job_queue: &str) -> Self {
        Self {
            batch,
            job_queue: job_queue.to_owned(),
        }
    }
}

#[async_trait]
impl JobLedger for EndpointBatch {
    async fn facts(&self, job_ids: &[String]) -> Result<Vec<JobFacts>> {
        describe_facts(&self.batch, job_ids).await
    }

    /// The emulator's Batch keeps its own job records; what it describes is its own.
    async fn settle(
        &self,
        _job_id: &str,
        _status: granary::domain::batch_event::JobStatus,
        _detail: &serde_json::Value,
    ) -> Result<()> {
        Ok(())
    }

    async fn finished(&self) -> Result<Vec<String>> {
        // The emulator finishes jobs inside SubmitJob; real Batch would have them RUNNING first.
        let finished = self
            .listed(&[JobStatus::Succeeded, JobStatus::Failed])
            .await?;
        Ok(finished.into_iter().map(|(_, id)| id).collect())
    }

    async fn jobs(&self) -> Result<Vec<(String, String)>> {
        let mut all = self
            .listed(&[
                JobStatus::Submitted,
                JobStatus::Pending,
                JobStatus::Runnable,
                JobStatus::Starting,
                JobStatus::Running,
                JobStatus::Succeeded,
                JobStatus::Failed,
            ])
            .await?;
        all.sort();
        Ok(all)
    }
}

impl EndpointBatch {
    /// (name, id) of every job on the queue in one of `statuses`, through ListJobs' pages.
    async fn listed(&self, statuses: &[JobStatus]) -> Result<Vec<(String, String)>> {
        let mut out = Vec::new();
        for status in statuses {
            let mut pages = self
                .batch
                .list_jobs()
                .job_queue(&self.job_queue)
                .job_status(status.clone())
                .into_paginator()
                .send();
            while let Some(page) = pages.next().await {
                let page = page.context("ListJobs")?;
                for j in page.job_summary_list.unwrap_or_default() {
                    out.push((j.job_name.unwrap_or_default(), j.job_id.unwrap_or_default()));
                }
            }
        }
        Ok(out)
    }
}
