//! Exactly-once submission of a window of first attempts: one claim object for the window
//! (`domain::window`), its marker in the open-claims index, SubmitJob per granule, one write
//! recording every job id.
//!
//! Order and crash points: the claim is created (If-None-Match) before anything else, so a second
//! run finds it; the open marker is written before the first SubmitJob, so every job granary may
//! have created is in the index the reconciler reads; the job ids are recorded (If-Match) after
//! the submissions. A run that dies anywhere leaves a claim without (some) job ids: the next run
//! leaves it while the lease runs (its owner may be inside SubmitJob, or Batch may have created a
//! job whose answer was lost), then takes it over with If-Match — one taker — and looks each
//! unrecorded job up by its deterministic name before submitting it.
//!
//! SubmitJob answers that say the call had no effect (a 4xx, throttling past the SDK's retries)
//! are tried again within the run; an answer that was lost (`may_have_taken_effect`) is not: the
//! job may exist, and Batch's ListJobs is not promised to show it at once, so only a takeover after
//! the lease may look for it.

use super::json::{read_json, write_json_retrying, RepositoryError};
use crate::contracts::job::job_request;
use crate::domain::granule::GranuleId;
use crate::domain::job_name::job_name;
use crate::domain::window::{window_key, FoundWindow, WindowClaim, WINDOW_ATTEMPT};
use crate::ports::{JobRunner, ObjectStore, PutCondition};
use chrono::Utc;
use futures::StreamExt;
use std::time::Duration;

/// How often a refused SubmitJob is tried within one run.
pub const SUBMIT_TRIES: u32 = 5;

/// Where window claims live and how they are worked.
#[derive(Clone, Copy)]
pub struct Windows<'a> {
    pub store: &'a dyn ObjectStore,
    pub jobs: &'a dyn JobRunner,
    pub claim_prefix: &'a str,
    pub open_prefix: &'a str,
    pub lease: Duration,
    /// SubmitJob calls in flight at once.
    pub concurrency: usize,
}

/// What became of one granule of the window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GranuleSubmission {
    /// Submitted now.
    Submitted { job_id: String },
    /// Recorded by an earlier run.
    AlreadySubmitted { job_id: String },
    /// Left half-done by a run that died; found in Batch by its name and recorded.
    Recovered { job_id: String },
    /// Not submitted this run (the reason); the window's next run tries again.
    NotSubmitted { error: String },
}

impl GranuleSubmission {
    pub fn job_id(&self) -> Option<&str> {
        match self {
            Self::Submitted { job_id }
            | Self::AlreadySubmitted { job_id }
            | Self::Recovered { job_id } => Some(job_id),
            Self::NotSubmitted { .. } => None,
        }
    }
}

/// What submitting a window did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WindowOutcome {
    /// The claim (this run's, or one found) and what became of each of its granules.
    Worked {
        claim: WindowClaim,
        granules: Vec<GranuleSubmission>,
    },
    /// A run still inside its lease holds the window: try again later.
    InFlight { claim: WindowClaim },
}

impl Windows<'_> {
    /// Whether the window at `(inventory, start)` was claimed before (one GET, retried while
    /// refused): a run redoing a window works it as its claim says, so what it would have decided
    /// about the window's granules before claiming it need not be decided again.
    pub async fn claimed(&self, inventory: &str, start: u64) -> Result<bool, RepositoryError> {
        let key = window_key(self.claim_prefix, inventory, start);
        crate::retry::again(
            crate::retry::Backoff::IN_RUN,
            "looking for the window's claim",
            || self.store.get(&key),
            crate::ports::StoreError::is_transient,
        )
        .await
        .map(|found| found.is_some())
        .map_err(RepositoryError::from)
    }

    /// Submits each granule of `window` at attempt 1 at most once, however often and
    /// concurrently it is asked. A window already claimed is worked as its claim says (its rows
    /// and granules, not `window`'s).
    pub async fn submit(&self, window: WindowClaim) -> Result<WindowOutcome, RepositoryError> {
        let key = window_key(self.claim_prefix, &window.inventory, window.start);
        let mut fresh = Some(window);
        // A handful of rounds covers every interleaving of one other writer.
        for _ in 0..4 {
            if let Some(window) = fresh.take() {
                match self.write(&key, &window, PutCondition::IfAbsent).await {
                    Ok(etag) => return self.work(&key, window, etag, false).await,
                    Err(e) if e.is_conflict() => {}
                    Err(e) => return Err(e),
                }
                fresh = Some(window);
            }
            let Some(found) = read_json::<WindowClaim>(self.store, &key).await? else {
                // Claims are never deleted by granary; if an operator removed it, claim afresh.
                continue;
            };
            let etag = found.etag.unwrap_or_default();
            let existing = found.value;
            match existing.on_found(Utc::now(), self.lease) {
                FoundWindow::Submitted => {
                    // Submitted: every granule has its job.
                    let granules = existing
                        .job_ids
                        .iter()
                        .flatten()
                        .map(|job_id| GranuleSubmission::AlreadySubmitted {
                            job_id: job_id.clone(),
                        })
                        .collect();
                    return Ok(WindowOutcome::Worked {
                        claim: existing,
                        granules,
                    });
                }
                FoundWindow::InFlight => return Ok(WindowOutcome::InFlight { claim: existing }),
                FoundWindow::TakeOver => {
                    let taken = WindowClaim {
                        claimed_at: Utc::now(),
                        ..existing
                    };
                    match self.write(&key, &taken, PutCondition::IfMatch(etag)).await {
                        Ok(etag) => return self.work(&key, taken, etag, true).await,
                        Err(e) if e.is_conflict() => fresh = None,
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        Err(RepositoryError::Store(crate::ports::StoreError::Conflict {
            key: key.clone(),
        }))
    }

    /// Submits the claim's unrecorded granules and records their jobs. `taken_over`: a run before
    /// may have created some of them, so each is looked up by name first.
    async fn work(
        &self,
        key: &str,
        claim: WindowClaim,
        etag: String,
        taken_over: bool,
    ) -> Result<WindowOutcome, RepositoryError> {
        let open = window_key(self.open_prefix, &claim.inventory, claim.start);
        crate::retry::again(
            crate::retry::Backoff::IN_RUN,
            "marking the window open",
            || {
                self.store
                    .put(&open, bytes::Bytes::new(), PutCondition::Overwrite)
            },
            crate::ports::StoreError::is_transient,
        )
        .await?;
        let tries: Vec<Try> = futures::stream::iter(claim.granules.iter().enumerate())
            .map(|(i, granule)| {
                let recorded = claim.job_id(i).map(str::to_owned);
                async move {
                    match recorded {
                        Some(job_id) => Try::Done(GranuleSubmission::AlreadySubmitted { job_id }),
                        None => self.ensure_job(granule, taken_over).await,
                    }
                }
            })
            .buffered(self.concurrency.max(1))
            .collect()
            .await;
        let found: Vec<Option<String>> = tries
            .iter()
            .map(|t| t.submission().job_id().map(str::to_owned))
            .collect();
        let mut recorded = claim.recording(&found, Utc::now());
        let lost_answer = tries.iter().any(|t| matches!(t, Try::AnswerLost(_)));
        if !recorded.is_submitted() && !lost_answer {
            // Every miss was refused: no job exists for it, so the next run may take the window
            // over at once instead of waiting out the lease.
            recorded.claimed_at = chrono::DateTime::<Utc>::UNIX_EPOCH;
        }
        match self
            .write(key, &recorded, PutCondition::IfMatch(etag))
            .await
        {
            Ok(_) => {}
            // Only a taker after the lease could have changed it: it finds our jobs by name.
            Err(e) if e.is_conflict() => {
                tracing::warn!(
                    claim = key,
                    "window claim changed while submitting; its jobs are findable by name"
                );
            }
            Err(e) => return Err(e),
        }
        Ok(WindowOutcome::Worked {
            claim: recorded,
            granules: tries.into_iter().map(Try::into_submission).collect(),
        })
    }

    /// Writes the claim under `condition`, trying a refused write again: a refusal did nothing,
    /// and a write whose answer was lost comes back as a conflict, which the callers read as
    /// "someone changed it" (the jobs stay findable by name).
    async fn write(
        &self,
        key: &str,
        claim: &WindowClaim,
        condition: PutCondition,
    ) -> Result<String, RepositoryError> {
        write_json_retrying(self.store, key, claim, condition, "writing a window claim").await
    }

    /// The granule's attempt-1 job: found by name (after a takeover), or submitted.
    async fn ensure_job(&self, granule: &GranuleId, look_first: bool) -> Try {
        let name = job_name(granule, WINDOW_ATTEMPT);
        if look_first && !crate::mutants::on("window-takeover-without-lookup") {
            let found = crate::retry::again(
                crate::retry::Backoff::IN_RUN,
                "ListJobs by name",
                || self.jobs.find_by_name(&name),
                |_| true,
            )
            .await;
            match found {
                Ok(Some(job)) => {
                    return Try::Done(GranuleSubmission::Recovered { job_id: job.job_id })
                }
                Ok(None) => {}
                Err(e) => {
                    return Try::Done(GranuleSubmission::NotSubmitted {
                        error: format!("looking up job {name}: {e}"),
                    })
                }
            }
        }
        let request = job_request(&name, granule, WINDOW_ATTEMPT);
        // A refusal did nothing: try again after a backoff. A lost answer is never re-sent.
        let submitted = crate::retry::again(
            crate::retry::Backoff {
                tries: SUBMIT_TRIES,
                ..crate::retry::Backoff::IN_RUN
            },
            "SubmitJob",
            || self.jobs.submit(request.clone()),
            |e| !e.may_have_taken_effect,
        )
        .await;
        match submitted {
            Ok(job) => Try::Done(GranuleSubmission::Submitted { job_id: job.job_id }),
            Err(e) if e.may_have_taken_effect => {
                tracing::warn!(job_name = name, error = %e, "SubmitJob's outcome is unknown; the window keeps its lease");
                Try::AnswerLost(e.to_string())
            }
            Err(e) => Try::Done(GranuleSubmission::NotSubmitted {
                error: e.to_string(),
            }),
        }
    }
}

/// One granule's submission, and whether a miss may have created a job after all.
enum Try {
    Done(GranuleSubmission),
    AnswerLost(String),
}

impl Try {
    fn submission(&self) -> GranuleSubmission {
        match self {
            Try::Done(s) => s.clone(),
            Try::AnswerLost(e) => GranuleSubmission::NotSubmitted { error: e.clone() },
        }
    }

    fn into_submission(self) -> GranuleSubmission {
        match self {
            Try::Done(s) => s,
            Try::AnswerLost(error) => GranuleSubmission::NotSubmitted { error },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::memory::{FlakyJobRunner, MemoryJobRunner, MemoryStore};

    fn granules() -> Vec<GranuleId> {
        [
            "HLS.S30.T18TYN.2022002T153012.v2.0",
            "HLS.L30.T18TYN.2022001T153012.v2.0",
            "HLS.S30.T18TYN.2021365T153012.v2.0",
        ]
        .iter()
        .map(|g| GranuleId::parse(g).unwrap())
        .collect()
    }

    fn window() -> WindowClaim {
        WindowClaim::new("inv/a.parquet", 0, 4, granules(), "t", Utc::now())
    }

    fn windows<'a>(store: &'a MemoryStore, jobs: &'a dyn JobRunner, lease: u64) -> Windows<'a> {
        Windows {
            store,
            jobs,
            claim_prefix: "claims/",
            open_prefix: "open/",
            lease: Duration::from_secs(lease),
            concurrency: 2,
        }
    }

    fn job_ids(outcome: &WindowOutcome) -> Vec<Option<String>> {
        match outcome {
            WindowOutcome::Worked { granules, .. } => granules
                .iter()
                .map(|g| g.job_id().map(str::to_owned))
                .collect(),
            WindowOutcome::InFlight { .. } => panic!("in flight"),
        }
    }

    #[tokio::test]
    async fn a_window_is_submitted_once_with_three_puts() {
        let (store, jobs) = (MemoryStore::new(), MemoryJobRunner::default());
        let w = windows(&store, &jobs, 900);
        let first = w.submit(window()).await.unwrap();
        assert!(job_ids(&first).iter().all(Option::is_some));
        let again = w.submit(window()).await.unwrap();
        assert_eq!(job_ids(&again), job_ids(&first));
        let WindowOutcome::Worked { granules, .. } = again else {
            unreachable!()
        };
        assert!(granules
            .iter()
            .all(|g| matches!(g, GranuleSubmission::AlreadySubmitted { .. })));
        assert_eq!(jobs.submitted().len(), 3);
        assert!(jobs.submitted().iter().all(|r| r.job_name.contains("-a1-")));
        let keys: Vec<String> = store
            .list("")
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.key)
            .collect();
        assert_eq!(
            keys,
            vec![
                "claims/windows/inv/a.parquet/start=000000000000.json".to_owned(),
                "open/windows/inv/a.parquet/start=000000000000.json".to_owned(),
            ]
        );
    }

    #[tokio::test]
    async fn refusals_are_tried_again_and_a_window_left_refused_is_released_at_once() {
        let store = MemoryStore::new();
        let flaky = FlakyJobRunner::refusing(3);
        let out = windows(&store, &flaky, 900).submit(window()).await.unwrap();
        assert!(job_ids(&out).iter().all(Option::is_some), "{out:?}");
        // Refused past the tries: nothing was created, so the window is free at once.
        let store = MemoryStore::new();
        let refusing = FlakyJobRunner::refusing(u32::MAX);
        let out = windows(&store, &refusing, 900)
            .submit(window())
            .await
            .unwrap();
        assert!(job_ids(&out).iter().all(Option::is_none));
        let next = windows(&store, &refusing.inner, 900)
            .submit(window())
            .await
            .unwrap();
        assert!(job_ids(&next).iter().all(Option::is_some), "{next:?}");
        assert_eq!(refusing.inner.submitted().len(), 3);
    }

    #[tokio::test]
    async fn lost_answers_keep_the_lease_and_the_jobs_are_found_by_name_not_resubmitted() {
        let store = MemoryStore::new();
        let lossy = FlakyJobRunner::losing_answers();
        let out = windows(&store, &lossy, 900).submit(window()).await.unwrap();
        assert!(job_ids(&out).iter().all(Option::is_none));
        assert_eq!(lossy.inner.submitted().len(), 3, "each submitted once");
        // Inside the lease: left alone.
        let again = windows(&store, &lossy.inner, 900)
            .submit(window())
            .await
            .unwrap();
        assert!(matches!(again, WindowOutcome::InFlight { .. }));
        // After it: taken over, every job found by its name.
        let after = windows(&store, &lossy.inner, 0)
            .submit(window())
            .await
            .unwrap();
        let WindowOutcome::Worked { granules, .. } = after else {
            panic!("{after:?}")
        };
        assert!(granules
            .iter()
            .all(|g| matches!(g, GranuleSubmission::Recovered { .. })));
        assert_eq!(lossy.inner.submitted().len(), 3, "never submitted twice");
    }

    #[tokio::test]
    async fn a_window_found_is_worked_as_its_claim_says() {
        let (store, jobs) = (MemoryStore::new(), MemoryJobRunner::default());
        let w = windows(&store, &jobs, 900);
        w.submit(window()).await.unwrap();
        // A later run reading more rows from the same start gets the first run's window.
        let mut wider = window();
        wider.rows = 10;
        wider
            .granules
            .push(GranuleId::parse("HLS.S30.T18TYN.2021364T153012.v2.0").unwrap());
        let WindowOutcome::Worked { claim, granules } = w.submit(wider).await.unwrap() else {
            panic!()
        };
        assert_eq!((claim.rows, granules.len()), (4, 3));
        assert_eq!(jobs.submitted().len(), 3);
    }
}
