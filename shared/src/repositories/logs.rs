//! The log objects under `GRANARY_LOG_PREFIX`: one JSON record per finished attempt, hive-keyed
//! for Athena (`domain::layout::logs`). This repository owns their protocol:
//!
//! - a log is created only if absent (If-None-Match), so a duplicate event never rewrites one;
//! - a failure is logged, then routed, then marked routed (If-Match): a crash between the send and
//!   the mark leaves an unrouted log the next delivery finishes, never a lost granule;
//! - a success relocates the granule's earlier failure logs under outcome=success, marked
//!   superseded (copy, then delete: a crash leaves a duplicate, never a loss), so outcome=failure
//!   means "still failing";
//! - a late failure of a granule that already succeeded is filed as superseded, never routed;
//! - a success a re-validation found wanting is revoked in place (kept, marked `revoked`): it no
//!   longer stands for the attempts the re-validation sends the granule round to make.
//!
//! And the report scan (`granary report --scan`): the report inputs read straight from the logs (a
//! LIST and one GET per log), for when Athena is not at hand.

use super::json::{read_json, write_json_retrying, RepositoryError, Versioned};

use crate::domain::classify::Route;
use crate::domain::layout::logs::{
    LogKey, LogOutcome, LogRecord, Revocation, SuccessEvidence, Supersession,
};
use crate::domain::report::LogFact;
use crate::ports::{ObjectStore, PutCondition};
use futures::StreamExt;

/// Earlier attempts whose failure logs a success looks up by key, one GET each, before it lists
/// the granule's failure folder instead: S3 prices a LIST as a PUT ($0.005 a thousand) and a GET
/// at $0.0004, so twelve GETs cost what one LIST does.
const ATTEMPTS_LOOKED_UP_BY_KEY: u32 = crate::domain::cost::prices::GETS_A_LIST_IS_WORTH as u32;

/// The logs under one prefix.
#[derive(Clone, Copy)]
pub struct Logs<'a> {
    store: &'a dyn ObjectStore,
    prefix: &'a str,
}

/// What logging a success found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SuccessLogged {
    /// The success log was already there (a duplicate delivery).
    pub duplicate: bool,
    /// Failure logs moved under outcome=success by this call.
    pub relocated: usize,
}

/// What logging a failure found.
#[derive(Debug, Clone, PartialEq)]
pub enum FailureLogged {
    /// Logged now; route it, then [`Logs::mark_routed`] it.
    New(Versioned<LogRecord>),
    /// Logged and routed before (on this route): a duplicate delivery, nothing to send.
    AlreadyRouted(Route),
    /// Logged before but not routed: a delivery is routing it now, or died before routing.
    Unrouted(Versioned<LogRecord>),
}

/// The success that stands for one attempt of a granule (`Logs::success_standing_for`).
enum SuccessSide {
    /// A success log at or below the attempt (read directly, or followed from a late failure
    /// filed after it); it may be revoked.
    Logged(Box<LogRecord>),
    /// A success after the attempt superseded its failure: it stands, and any revocation of it
    /// came after the attempt was made.
    Later(u32),
    /// A late failure names a success at this attempt whose log is not there (a success is
    /// written before anything names it): taken at its word.
    NamedNotFound(u32),
}

impl<'a> Logs<'a> {
    pub fn new(store: &'a dyn ObjectStore, prefix: &'a str) -> Self {
        Self { store, prefix }
    }

    /// The log at `key` (`None`: not written), read again while refused (`what` names the read).
    pub async fn read_retrying(
        &self,
        key: &LogKey,
        what: &'static str,
    ) -> Result<Option<LogRecord>, RepositoryError> {
        let at = key.to_key(self.prefix);
        Ok(
            super::json::read_json_retrying::<LogRecord>(self.store, &at, what)
                .await?
                .map(|log| log.value),
        )
    }

    /// Creates the success log if absent and relocates the granule's earlier failures (also on a
    /// duplicate: the first delivery may have died half-way through relocating).
    pub async fn log_success(
        &self,
        key: &LogKey,
        record: &LogRecord,
    ) -> Result<SuccessLogged, RepositoryError> {
        let duplicate = match write_json_retrying(
            self.store,
            &key.to_key(self.prefix),
            record,
            PutCondition::IfAbsent,
            "writing a log",
        )
        .await
        {
            Ok(_) => false,
            Err(e) if e.is_conflict() => true,
            Err(e) => return Err(e),
        };
        // Attempt 1 has no earlier failures.
        let relocated = if record.attempt > 1 {
            self.relocate_failures(key, record).await?
        } else {
            0
        };
        Ok(SuccessLogged {
            duplicate,
            relocated,
        })
    }

    /// Moves the granule's failure logs under outcome=success, marked superseded by `success`.
    async fn relocate_failures(
        &self,
        success_key: &LogKey,
        success: &LogRecord,
    ) -> Result<usize, RepositoryError> {
        let failure = success_key.with_outcome(LogOutcome::Failure);
        // The earlier attempts' keys are known: a GET each (absent ones answer 404) costs less
        // than the LIST of the granule's failure folder while there are few of them.
        let candidates: Vec<String> = if success.attempt <= ATTEMPTS_LOOKED_UP_BY_KEY + 1 {
            (1..success.attempt)
                .map(|attempt| {
                    LogKey {
                        attempt,
                        ..failure.clone()
                    }
                    .to_key(self.prefix)
                })
                .collect()
        } else {
            let listed = self
                .store
                .list(&failure.granule_prefix(self.prefix))
                .await?;
            listed.into_iter().map(|meta| meta.key).collect()
        };
        let mut moved = 0;
        for key in candidates {
            let Ok(old_key) = LogKey::parse(self.prefix, &key) else {
                tracing::warn!(key, "foreign object under the failure logs left alone");
                continue;
            };
            // Only attempts before the success are superseded by it.
            if old_key.attempt >= success.attempt {
                continue;
            }
            let Some(old) = read_json::<LogRecord>(self.store, &key).await? else {
                continue;
            };
            let mut record = old.value;
            record.superseded = Some(Supersession {
                by_attempt: success.attempt,
                by_job_id: success.job_id.clone(),
                at: crate::clock::now(),
            });
            let new_key = old_key
                .with_outcome(LogOutcome::Success)
                .to_key(self.prefix);
            // Never over a log already at the success-side key: this attempt's own success
            // (an attempt the sweeper timed out that then succeeded late, kept even once a
            // re-validation revoked it) stays, and the failure stays where it is beside it.
            // What is there may also be this copy, made by a run that died before the delete.
            match write_json_retrying(
                self.store,
                &new_key,
                &record,
                PutCondition::IfAbsent,
                "writing a log",
            )
            .await
            {
                Ok(_) => {}
                Err(e) if e.is_conflict() => {
                    let there = read_json::<LogRecord>(self.store, &new_key).await?;
                    if there.is_some_and(|l| l.value.superseded.is_none()) {
                        continue;
                    }
                }
                Err(e) => return Err(e),
            }
            self.store.delete(&key).await?;
            moved += 1;
        }
        Ok(moved)
    }

    /// The attempt of `key`'s granule that succeeded, if one did by `key`'s attempt or since and
    /// still stands for `key`'s attempt (a re-validation revokes a success for the attempts it
    /// sends the granule round to make: `domain::layout::logs::SuccessEvidence`).
    ///
    /// While attempts are few, one GET a key from `key`'s attempt down: a success at a later
    /// attempt moved this attempt's failure log to this attempt's success-side key (marked
    /// superseded by it), and this attempt's log exists before any later attempt does. Every
    /// end is logged before it is routed and only a routed end makes the next attempt: the
    /// monitor's, the reconciler's recoveries and the item sweeper's timed-out attempts all go
    /// through the monitor's handler (`handlers::monitor::job_finished`). So the success-side
    /// key of `key`'s attempt or an earlier one holds a success or a failure it superseded.
    /// Past [`ATTEMPTS_LOOKED_UP_BY_KEY`], one LIST of the granule's success folder finds it.
    /// A late failure filed after an earlier success costs one GET more: that success's log.
    pub async fn succeeded_attempt(&self, key: &LogKey) -> Result<Option<u32>, RepositoryError> {
        Ok(match self.success_standing_for(key).await? {
            None => None,
            Some(SuccessSide::Later(attempt) | SuccessSide::NamedNotFound(attempt)) => {
                Some(attempt)
            }
            Some(SuccessSide::Logged(log)) => match log.success_evidence(key.attempt) {
                SuccessEvidence::Revoked => None,
                SuccessEvidence::Succeeded(a) | SuccessEvidence::SeeSuccessAt(a) => Some(a),
            },
        })
    }

    /// The success that stands on `key`'s granule's success side for `key`'s attempt, read by
    /// [`Self::highest_success_side`] and, for a late failure filed after an earlier success,
    /// followed to that success's log (one GET more). `None`: no success is logged.
    async fn success_standing_for(
        &self,
        key: &LogKey,
    ) -> Result<Option<SuccessSide>, RepositoryError> {
        let success = key.with_outcome(LogOutcome::Success);
        let Some(found) = self.highest_success_side(&success).await? else {
            return Ok(None);
        };
        Ok(Some(match found.value.success_evidence(key.attempt) {
            SuccessEvidence::Succeeded(attempt) if attempt != found.value.attempt => {
                SuccessSide::Later(attempt)
            }
            SuccessEvidence::Succeeded(_) | SuccessEvidence::Revoked => {
                SuccessSide::Logged(Box::new(found.value))
            }
            SuccessEvidence::SeeSuccessAt(attempt) => {
                let at = LogKey { attempt, ..success };
                match read_json::<LogRecord>(self.store, &at.to_key(self.prefix)).await? {
                    Some(log) => SuccessSide::Logged(Box::new(log.value)),
                    None => SuccessSide::NamedNotFound(attempt),
                }
            }
        }))
    }

    /// The log at the highest attempt up to `success`'s on the granule's success side.
    async fn highest_success_side(
        &self,
        success: &LogKey,
    ) -> Result<Option<Versioned<LogRecord>>, RepositoryError> {
        if success.attempt > ATTEMPTS_LOOKED_UP_BY_KEY {
            let listed = self
                .store
                .list(&success.granule_prefix(self.prefix))
                .await?;
            let highest = listed
                .iter()
                .filter_map(|m| LogKey::parse(self.prefix, &m.key).ok())
                .filter(|k| k.attempt <= success.attempt)
                .max_by_key(|k| k.attempt);
            return match highest {
                Some(k) => read_json(self.store, &k.to_key(self.prefix)).await,
                None => Ok(None),
            };
        }
        for attempt in (1..=success.attempt).rev() {
            let at = LogKey {
                attempt,
                ..success.clone()
            };
            if let Some(log) = read_json::<LogRecord>(self.store, &at.to_key(self.prefix)).await? {
                return Ok(Some(log));
            }
        }
        Ok(None)
    }

    /// Revokes the success that stands for `key`'s granule at `key`'s attempt (the item's, as a
    /// re-validation found its products wanting), for the attempts after it: written before
    /// the granule is sent round again, so a failure of the next attempt is routed, not taken
    /// for a late end of a granule that succeeded. Returns the revoked success's attempt; `None`
    /// when no success is logged (nothing for a later failure to be mistaken against).
    /// Idempotent: a redelivery rewrites the same revocation.
    pub async fn revoke_success(
        &self,
        key: &LogKey,
        reason: &str,
    ) -> Result<Option<u32>, RepositoryError> {
        // A success after the item's attempt is not the one re-validated; one named by a late
        // failure but not found has nothing to revoke.
        let Some(SuccessSide::Logged(log)) = self.success_standing_for(key).await? else {
            return Ok(None);
        };
        let mut record = *log;
        if record
            .revoked
            .as_ref()
            .is_some_and(|r| r.through_attempt >= key.attempt)
        {
            return Ok(Some(record.attempt));
        }
        record.revoked = Some(Revocation {
            through_attempt: key.attempt,
            reason: reason.to_owned(),
            at: crate::clock::now(),
        });
        let at = LogKey {
            attempt: record.attempt,
            ..key.with_outcome(LogOutcome::Success)
        };
        write_json_retrying(
            self.store,
            &at.to_key(self.prefix),
            &record,
            PutCondition::Overwrite,
            "revoking a success log",
        )
        .await?;
        Ok(Some(record.attempt))
    }

    /// Keeps a late failure of a granule that succeeded at `by_attempt` as evidence, filed under
    /// outcome=success and marked superseded; never overwrites the success itself.
    pub async fn file_late_failure(
        &self,
        key: &LogKey,
        mut record: LogRecord,
        by_attempt: u32,
    ) -> Result<(), RepositoryError> {
        if by_attempt == record.attempt {
            return Ok(());
        }
        record.superseded = Some(Supersession {
            by_attempt,
            by_job_id: String::new(),
            at: crate::clock::now(),
        });
        let late_key = key.with_outcome(LogOutcome::Success).to_key(self.prefix);
        match write_json_retrying(
            self.store,
            &late_key,
            &record,
            PutCondition::IfAbsent,
            "writing a log",
        )
        .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_conflict() => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Creates the failure log if absent; otherwise says whether the existing one was routed.
    pub async fn log_failure(
        &self,
        key: &LogKey,
        record: LogRecord,
    ) -> Result<FailureLogged, RepositoryError> {
        let log_key = key.to_key(self.prefix);
        match write_json_retrying(
            self.store,
            &log_key,
            &record,
            PutCondition::IfAbsent,
            "writing a log",
        )
        .await
        {
            Ok(etag) => Ok(FailureLogged::New(Versioned {
                value: record,
                etag: Some(etag),
            })),
            Err(e) if e.is_conflict() => {
                // Logs are never deleted except by relocation, which re-creates them elsewhere.
                let Some(existing) = read_json::<LogRecord>(self.store, &log_key).await? else {
                    return Err(e);
                };
                Ok(if existing.value.routed_at.is_some() {
                    FailureLogged::AlreadyRouted(existing.value.route)
                } else {
                    FailureLogged::Unrouted(existing)
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Marks a failure log routed, if it is still as it was read. A conflict means a concurrent
    /// duplicate marked it first (the requeuer's claim absorbs its second message): not an error.
    pub async fn mark_routed(
        &self,
        key: &LogKey,
        mut log: Versioned<LogRecord>,
    ) -> Result<(), RepositoryError> {
        log.value.routed_at = Some(crate::clock::now());
        match write_json_retrying(
            self.store,
            &key.to_key(self.prefix),
            &log.value,
            log.condition(),
            "writing a log",
        )
        .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_conflict() => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// Reads every log under `prefix`; `progress(done, total)` is called as logs are read. Objects
/// that are not granary logs are skipped with a warning.
pub async fn scan_log_facts(
    store: &dyn ObjectStore,
    prefix: &str,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Result<Vec<LogFact>, RepositoryError> {
    let listed = store.list(prefix).await?;
    let total = listed.len() as u64;
    let mut done = 0u64;
    let mut facts = Vec::with_capacity(listed.len());
    let mut reads =
        futures::stream::iter(listed.into_iter().filter_map(|meta| {
            match LogKey::parse(prefix, &meta.key) {
                Ok(key) => Some((meta.key, key)),
                Err(e) => {
                    tracing::warn!(error = %e, "not a log; skipped");
                    None
                }
            }
        }))
        .map(|(raw, key)| async move {
            let record = read_json::<LogRecord>(store, &raw).await;
            (key, record)
        })
        .buffered(32);
    while let Some((key, record)) = reads.next().await {
        done += 1;
        progress(done, total);
        let Some(record) = record? else { continue };
        let r = record.value;
        // A revoked success is its attempt's failure, for the re-validation's reason (as the
        // latest-outcome view has it).
        let revoked = r.revoked.is_some();
        let (outcome, reason) = match r.revoked {
            Some(revoked) => (LogOutcome::Failure, revoked.reason),
            None => (key.outcome, r.classification.reason),
        };
        facts.push(LogFact {
            granule_id: key.granule_id.to_string(),
            attempt: key.attempt,
            outcome: outcome.as_str().to_owned(),
            platform: key.platform.clone(),
            acquisition_date: key
                .acquisition_date
                .map(|d| d.format("%Y-%m-%d").to_string())
                .unwrap_or_else(|| "unknown".to_owned()),
            reason,
            logged_at: r.logged_at.to_rfc3339(),
            superseded: r.superseded.is_some(),
            revoked,
            usage: crate::domain::cost::usage_of(&r.job),
            out_of_memory: matches!(
                r.classification.failure,
                Some(crate::domain::classify::FailureKind::OutOfMemory)
            ),
        });
    }
    Ok(facts)
}

mod pages;
pub use pages::LogPages;

#[cfg(test)]
mod tests;
