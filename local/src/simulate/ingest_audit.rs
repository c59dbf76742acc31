//! The ingest simulation's audit, by outcome: every batch and job ended, each as the seed's
//! fates allow — an object nothing stood in the way of completed, an altered, poisoned or
//! unreachable one failed with a reason and a notice on the failure DLQ — no processing attempt
//! submitted twice, no object minted twice, and every ended batch reported.

use super::ingest_world::IngestWorld;
use anyhow::Result;
use granary::domain::ingest::batch::BatchState;
use granary::domain::ingest::job::JobState;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Clone, Default, Serialize)]
pub struct IngestAudit {
    pub batches: u64,
    pub jobs: u64,
    pub completed: u64,
    pub failed: u64,
    pub jobs_by_state: BTreeMap<String, u64>,
    /// Batches and jobs left in a state that is not an end. Must be empty.
    pub unfinished: Vec<String>,
    /// Jobs whose end the fates do not allow. Must be empty.
    pub wrong_outcomes: Vec<String>,
    /// Processing job names Batch was given twice. Must be 0.
    pub processing_submitted_twice: u64,
    /// Jobs the identifier service minted for more than once. Must be 0.
    pub minted_twice: u64,
    /// Failed jobs without a reason, or failed in processing without a notice on the failure
    /// DLQ. Must be 0.
    pub failed_without_reason: u64,
    pub failed_without_notice: u64,
    /// Ended batches never reported. Must be 0.
    pub batches_unreported: u64,
}

impl IngestAudit {
    pub fn holds(&self) -> bool {
        self.unfinished.is_empty()
            && self.wrong_outcomes.is_empty()
            && self.processing_submitted_twice == 0
            && self.minted_twice == 0
            && self.failed_without_reason == 0
            && self.failed_without_notice == 0
            && self.batches_unreported == 0
    }
}

/// The ingest jobs the failure DLQ holds a notice for.
fn dead_lettered(w: &IngestWorld) -> BTreeSet<String> {
    w.dlq
        .messages()
        .iter()
        .filter_map(|m| {
            serde_json::from_str::<granary::contracts::ingest::IngestNotice>(&m.body)
                .ok()
                .map(|n| n.ingest_job.to_string())
        })
        .collect()
}

pub async fn audit(w: &IngestWorld, spec: &super::ingest::IngestSimSpec) -> Result<IngestAudit> {
    let mut a = IngestAudit::default();
    let mut names = BTreeSet::new();
    for request in w.jobs.submitted() {
        if !names.insert(request.job_name.clone()) {
            a.processing_submitted_twice += 1;
        }
    }
    let letters = dead_lettered(w);
    for id in w.batch_ids().await? {
        let Some(batch) = w.ctx.ingest().batch(&id).await? else {
            continue;
        };
        let batch = batch.value;
        a.batches += 1;
        let ended = matches!(
            batch.state,
            BatchState::Completed | BatchState::Failed | BatchState::Deleted
        );
        if !ended {
            a.unfinished.push(format!("batch {id}: {}", batch.state));
        } else if batch.reports == 0 {
            a.batches_unreported += 1;
        }
        let place = w.place_of(&id).await?;
        let callback_hangs = place.is_some_and(|b| w.callback_hangs(b));
        for n in 1..=batch.jobs {
            let jid = id.job(n);
            let Some(job) = w.ctx.ingest().job(&jid).await? else {
                a.unfinished.push(format!("{jid}: no record"));
                continue;
            };
            let job = job.value;
            a.jobs += 1;
            *a.jobs_by_state.entry(job.state.to_string()).or_default() += 1;
            a.minted_twice += u64::from(w.minter.minted_for(jid.as_str()).len() > 1);
            let fate = place.and_then(|b| w.fates.get(b)?.get(n - 1).copied());
            let may_complete = fate.is_some_and(|f| f.completes()) && !callback_hangs;
            match job.state {
                JobState::Completed | JobState::Deleted => {
                    a.completed += 1;
                    if !may_complete {
                        a.wrong_outcomes.push(format!(
                            "{jid} completed; its fate: {fate:?}, callback hangs: {callback_hangs}"
                        ));
                    }
                }
                JobState::Failed => {
                    a.failed += 1;
                    a.failed_without_reason += u64::from(job.reason.is_empty());
                    // A processing failure is dead-lettered (docs/ingest.md); a download's is
                    // in the batch's report.
                    let failed_in_processing =
                        fate.is_some_and(|f| f.poisoned && !f.altered && !f.server_hangs);
                    a.failed_without_notice +=
                        u64::from(failed_in_processing && !letters.contains(jid.as_str()));
                    if may_complete {
                        a.wrong_outcomes.push(format!(
                            "{jid} failed ({}); nothing stood in its way",
                            job.reason
                        ));
                    }
                }
                other => a.unfinished.push(format!(
                    "{jid}: {other} (retries {}) {}",
                    job.retry_count, job.reason
                )),
            }
        }
    }
    // Every submission made its batch, and every batch its jobs.
    if a.batches != spec.batches as u64 || a.jobs != (spec.batches * spec.objects) as u64 {
        a.unfinished.push(format!(
            "{} batches of {} jobs, not {} of {}",
            a.batches,
            a.jobs,
            spec.batches,
            spec.batches * spec.objects
        ));
    }
    Ok(a)
}
