//! The one Batch submission protocol: every submitter (the feeder's windows, the requeuer's
//! attempts, an ingest job's processing) submits its jobs through [`Submitter::submit`], over a
//! claim of one job or of a window of them (`domain::claim::JobsClaim`).
//!
//! Order and crash points: the claim is created (If-None-Match) before anything else, so a second
//! run finds it; the open marker (if the work has one: the reconciler's index) is written before
//! the first SubmitJob, so every job granary may have created is indexed; the job ids are
//! recorded (If-Match) after the submissions. A run that dies anywhere leaves a claim without
//! (some) job ids: the next run leaves it while the lease runs (its owner may be inside
//! SubmitJob, or Batch may have created a job whose answer was lost), then takes it over with
//! If-Match — one taker — and looks each unrecorded job up by its deterministic name before
//! submitting it.
//!
//! A claim may wait on a look ([`Screen`]) made after its open marker is written and before
//! any SubmitJob: the feeder's window looks for its granules among the item records there, so
//! that one of it and the importer's discovery (which creates a record, then reads the open
//! windows) sees the other. The look is written back into the claim before the first job, so a
//! takeover finds either a look still to make (no job can exist) or one made.
//!
//! SubmitJob answers that say the call had no effect (a 4xx, throttling past the SDK's retries)
//! are tried again within the run, and a claim whose misses were all refused is released at once
//! (no job exists for them); an answer that was lost (`may_have_taken_effect`) is never re-sent:
//! the job may exist, and Batch's ListJobs is not promised to show it at once, so only a takeover
//! after the lease may look for it.

use super::json::{read_json, write_json_retrying, RepositoryError};
use crate::domain::claim::{FoundClaim, JobsClaim};
use crate::ports::{JobRequest, JobRunner, ObjectStore, PutCondition};
use chrono::Utc;
use futures::StreamExt;
use std::time::Duration;

/// How often a refused SubmitJob is tried within one run.
pub const SUBMIT_TRIES: u32 = 5;

/// The store, Batch and the lease every submission is made with.
#[derive(Clone, Copy)]
pub struct Submitter<'a> {
    pub store: &'a dyn ObjectStore,
    pub jobs: &'a dyn JobRunner,
    /// How long a claim without (all) its job ids belongs to whoever made it.
    pub lease: Duration,
    /// SubmitJob calls in flight at once (a window's).
    pub concurrency: usize,
    /// Who claims (queue-feeder, requeuer, ingest-dispatcher), for the operator.
    pub claimed_by: &'a str,
    /// Where a throttled SubmitJob is counted (`SubmitJobThrottles`).
    pub metrics: &'a crate::metrics::Metrics,
}

/// One unit of work to submit at most once.
pub struct Submission<'a, C> {
    /// Where its claim lives.
    pub claim_key: String,
    /// Its marker in the open-claims index the reconciler reads (none for work another loop
    /// watches, such as an ingest job's processing, which its own tick describes).
    pub open_key: Option<String>,
    /// The claim a first run creates; a run that finds one works the claim found instead.
    pub claim: C,
    /// The job requests of a claim, in its order (each with its deterministic name).
    pub requests: &'a (dyn Fn(&C) -> Vec<JobRequest> + Sync),
    /// The look the claim's jobs wait on, if it is pending ([`JobsClaim::screen_pending`]).
    pub screen: Option<&'a dyn Screen<C>>,
}

/// The look a claim whose [`JobsClaim::screen_pending`] says so waits on: the claim to work,
/// its look done (the jobs it no longer needs dropped).
#[async_trait::async_trait]
pub trait Screen<C>: Sync {
    async fn screen(&self, claim: &C) -> Result<C, RepositoryError>;
}

/// What became of one job of a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobSubmission {
    /// Submitted now.
    Submitted { job_id: String },
    /// Recorded by an earlier run.
    AlreadySubmitted { job_id: String },
    /// Left half-done by a run that died; found in Batch by its name and recorded.
    Recovered { job_id: String },
    /// Not submitted this run; the claim's next run tries again. `answer_lost`: SubmitJob may
    /// have created it, so the claim keeps its lease.
    NotSubmitted { error: String, answer_lost: bool },
}

impl JobSubmission {
    pub fn job_id(&self) -> Option<&str> {
        match self {
            Self::Submitted { job_id }
            | Self::AlreadySubmitted { job_id }
            | Self::Recovered { job_id } => Some(job_id),
            Self::NotSubmitted { .. } => None,
        }
    }
}

/// What submitting a claim did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Submitted<C> {
    /// The claim (this run's, or one found) and what became of each of its jobs.
    Worked { claim: C, jobs: Vec<JobSubmission> },
    /// A run still inside its lease holds the claim: try again later.
    InFlight { claim: C },
}

impl Submitter<'_> {
    /// Submits each job of `submission` at most once, however often and concurrently it is
    /// asked. A claim found is worked as it says (its jobs, not `submission.claim`'s).
    pub async fn submit<C: JobsClaim>(
        &self,
        submission: Submission<'_, C>,
    ) -> Result<Submitted<C>, RepositoryError> {
        let key = submission.claim_key.as_str();
        let mut fresh = Some(submission.claim.clone());
        // A handful of rounds covers every interleaving of one other writer.
        for _ in 0..4 {
            if let Some(claim) = fresh.take() {
                match self.write(key, &claim, PutCondition::IfAbsent).await {
                    Ok(etag) => return self.work(&submission, claim, etag, false).await,
                    Err(e) if e.is_conflict() => {}
                    Err(e) => return Err(e),
                }
                fresh = Some(claim);
            }
            let Some(found) = read_json::<C>(self.store, key).await? else {
                // Claims are never deleted by granary; if an operator removed it, claim afresh.
                continue;
            };
            let etag = found.etag.unwrap_or_default();
            let existing = found.value;
            match existing.on_found(crate::clock::now(), self.lease) {
                FoundClaim::Submitted => {
                    let jobs = existing
                        .recorded()
                        .into_iter()
                        .flatten()
                        .map(|job_id| JobSubmission::AlreadySubmitted { job_id })
                        .collect();
                    return Ok(Submitted::Worked {
                        claim: existing,
                        jobs,
                    });
                }
                FoundClaim::InFlight if !crate::mutants::on("claim-takeover-within-lease") => {
                    return Ok(Submitted::InFlight { claim: existing })
                }
                FoundClaim::InFlight | FoundClaim::TakeOver => {
                    let taken = existing.reclaimed(self.claimed_by, crate::clock::now());
                    match self.write(key, &taken, PutCondition::IfMatch(etag)).await {
                        Ok(etag) => return self.work(&submission, taken, etag, true).await,
                        Err(e) if e.is_conflict() => fresh = None,
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        Err(RepositoryError::Store(crate::ports::StoreError::Conflict {
            key: key.to_owned(),
        }))
    }

    /// Submits the claim's unrecorded jobs and records them. `taken_over`: a run before may have
    /// created some of them, so each is looked up by name first.
    async fn work<C: JobsClaim>(
        &self,
        submission: &Submission<'_, C>,
        claim: C,
        etag: String,
        taken_over: bool,
    ) -> Result<Submitted<C>, RepositoryError> {
        let early = crate::mutants::on("screen-before-the-marker");
        let (claim, etag) = match early {
            true => match self.screened(submission, claim, etag).await? {
                Ok(looked) => looked,
                Err(claim) => return Ok(Submitted::InFlight { claim }),
            },
            false => (claim, etag),
        };
        if let Some(open) = &submission.open_key {
            crate::retry::again(
                crate::retry::Backoff::IN_RUN,
                "marking the claim open",
                || {
                    self.store
                        .put(open, bytes::Bytes::new(), PutCondition::Overwrite)
                },
                crate::ports::StoreError::is_transient,
            )
            .await?;
        }
        let (claim, etag) = match self.screened(submission, claim, etag).await? {
            Ok(looked) => looked,
            // Another run took the claim over meanwhile (its lease had run out): it submits.
            Err(claim) => return Ok(Submitted::InFlight { claim }),
        };
        let requests = (submission.requests)(&claim);
        let recorded = claim.recorded();
        let tries: Vec<JobSubmission> = futures::stream::iter(requests.into_iter().enumerate())
            .map(|(i, request)| {
                let recorded = recorded.get(i).cloned().flatten();
                async move {
                    match recorded {
                        Some(job_id) => JobSubmission::AlreadySubmitted { job_id },
                        None => self.ensure_job(request, taken_over).await,
                    }
                }
            })
            .buffered(self.concurrency.max(1))
            .collect()
            .await;
        let found: Vec<Option<String>> = tries
            .iter()
            .map(|t| t.job_id().map(str::to_owned))
            .collect();
        let mut written = claim.recording(&found, crate::clock::now());
        let answer_lost = tries.iter().any(|t| {
            matches!(
                t,
                JobSubmission::NotSubmitted {
                    answer_lost: true,
                    ..
                }
            )
        });
        if !written.is_submitted() && !answer_lost {
            // Every miss was refused: no job exists for it, so the next run may take the claim
            // over at once instead of waiting out the lease.
            written = written.reclaimed(self.claimed_by, chrono::DateTime::<Utc>::UNIX_EPOCH);
        }
        let key = submission.claim_key.as_str();
        match self.write(key, &written, PutCondition::IfMatch(etag)).await {
            Ok(_) => {}
            // Only a taker after the lease could have changed it: it finds our jobs by name.
            Err(e) if e.is_conflict() => {
                tracing::warn!(
                    claim = key,
                    "claim changed while submitting; its jobs are findable by name"
                );
            }
            Err(e) => return Err(e),
        }
        Ok(Submitted::Worked {
            claim: written,
            jobs: tries,
        })
    }

    /// The claim with its pending look made and written back (If-Match), and its new ETag;
    /// `Err(claim)` when the write found the claim changed: taken over, this run submits nothing.
    async fn screened<C: JobsClaim>(
        &self,
        submission: &Submission<'_, C>,
        claim: C,
        etag: String,
    ) -> Result<Result<(C, String), C>, RepositoryError> {
        let Some(screen) = submission.screen.filter(|_| claim.screen_pending()) else {
            return Ok(Ok((claim, etag)));
        };
        let looked = screen.screen(&claim).await?;
        let key = submission.claim_key.as_str();
        match self.write(key, &looked, PutCondition::IfMatch(etag)).await {
            Ok(etag) => Ok(Ok((looked, etag))),
            Err(e) if e.is_conflict() => Ok(Err(looked)),
            Err(e) => Err(e),
        }
    }

    /// Writes the claim under `condition`, trying a refused write again: a refusal did nothing,
    /// and a write whose answer was lost comes back as a conflict, which the callers read as
    /// "someone changed it" (the jobs stay findable by name).
    async fn write<C: JobsClaim>(
        &self,
        key: &str,
        claim: &C,
        condition: PutCondition,
    ) -> Result<String, RepositoryError> {
        write_json_retrying(self.store, key, claim, condition, "writing a claim").await
    }

    /// The job: found by name (after a takeover), or submitted.
    async fn ensure_job(&self, request: JobRequest, look_first: bool) -> JobSubmission {
        let name = request.job_name.clone();
        if look_first && !crate::mutants::on("takeover-without-lookup") {
            let found = crate::retry::again(
                crate::retry::Backoff::IN_RUN,
                "ListJobs by name",
                || self.jobs.find_by_name(&name),
                |_| true,
            )
            .await;
            match found {
                Ok(Some(job)) => return JobSubmission::Recovered { job_id: job.job_id },
                Ok(None) => {}
                Err(e) => {
                    return JobSubmission::NotSubmitted {
                        error: format!("looking up job {name}: {e}"),
                        // The claim was taken over, so whoever takes it next looks again.
                        answer_lost: false,
                    };
                }
            }
        }
        // A refusal did nothing: try again after a backoff. A lost answer is never re-sent.
        let submitted = crate::retry::again(
            crate::retry::Backoff {
                tries: SUBMIT_TRIES,
                ..crate::retry::Backoff::IN_RUN
            },
            "SubmitJob",
            || async {
                let answer = self.jobs.submit(request.clone()).await;
                if answer
                    .as_ref()
                    .is_err_and(crate::ports::JobRunnerError::is_throttle)
                {
                    let throttles = crate::domain::metrics::Metric::SubmitJobThrottles;
                    self.metrics.count(throttles, &[], 1);
                }
                answer
            },
            |e| !e.may_have_taken_effect,
        )
        .await;
        match submitted {
            Ok(job) => JobSubmission::Submitted { job_id: job.job_id },
            Err(e) => {
                if e.may_have_taken_effect {
                    tracing::warn!(job_name = name, error = %e, "SubmitJob's outcome is unknown; the claim keeps its lease");
                }
                JobSubmission::NotSubmitted {
                    error: e.to_string(),
                    answer_lost: e.may_have_taken_effect,
                }
            }
        }
    }
}
