//! The log objects under `GRANARY_LOG_PREFIX`: one JSON record per finished attempt, hive-keyed
//! for Athena (`domain::layout::logs`). This repository owns their protocol:
//!
//! - a log is created only if absent (If-None-Match), so a duplicate event never rewrites one;
//! - a failure is logged, then routed, then marked routed (If-Match): a crash between the send and
//!   the mark leaves an unrouted log the next delivery finishes, never a lost granule;
//! - a success relocates the granule's earlier failure logs under outcome=success, marked
//!   superseded (copy, then delete: a crash leaves a duplicate, never a loss), so outcome=failure
//!   means "still failing";
//! - a late failure of a granule that already succeeded is filed as superseded, never routed.
//!
//! And the report scan (`granary report --scan`): the report inputs read straight from the logs (a
//! LIST and one GET per log), for when Athena is not at hand.

use super::json::{read_json, write_json_retrying, RepositoryError, Versioned};

use crate::domain::layout::logs::{LogKey, LogOutcome, LogRecord, Supersession};
use crate::domain::report::LogFact;
use crate::ports::{ObjectStore, PutCondition};
use chrono::Utc;
use futures::StreamExt;

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
    /// Logged and routed before: a duplicate delivery, nothing to do.
    AlreadyRouted,
    /// Logged before but not routed: a delivery is routing it now, or died before routing.
    Unrouted(Versioned<LogRecord>),
}

impl<'a> Logs<'a> {
    pub fn new(store: &'a dyn ObjectStore, prefix: &'a str) -> Self {
        Self { store, prefix }
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
        let failures = success_key
            .with_outcome(LogOutcome::Failure)
            .granule_prefix(self.prefix);
        let mut moved = 0;
        for meta in self.store.list(&failures).await? {
            let Ok(old_key) = LogKey::parse(self.prefix, &meta.key) else {
                tracing::warn!(
                    key = meta.key,
                    "foreign object under the failure logs left alone"
                );
                continue;
            };
            let Some(old) = read_json::<LogRecord>(self.store, &meta.key).await? else {
                continue;
            };
            let mut record = old.value;
            record.superseded = Some(Supersession {
                by_attempt: success.attempt,
                by_job_id: success.job_id.clone(),
                at: Utc::now(),
            });
            let new_key = old_key
                .with_outcome(LogOutcome::Success)
                .to_key(self.prefix);
            write_json_retrying(
                self.store,
                &new_key,
                &record,
                PutCondition::Overwrite,
                "writing a log",
            )
            .await?;
            self.store.delete(&meta.key).await?;
            moved += 1;
        }
        Ok(moved)
    }

    /// The latest attempt of `key`'s granule that succeeded, if one did.
    pub async fn succeeded_attempt(&self, key: &LogKey) -> Result<Option<u32>, RepositoryError> {
        let successes = key
            .with_outcome(LogOutcome::Success)
            .granule_prefix(self.prefix);
        Ok(self
            .store
            .list(&successes)
            .await?
            .iter()
            .filter_map(|m| LogKey::parse(self.prefix, &m.key).ok().map(|k| k.attempt))
            .max())
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
            at: Utc::now(),
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
                    FailureLogged::AlreadyRouted
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
        log.value.routed_at = Some(Utc::now());
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
        facts.push(LogFact {
            granule_id: key.granule_id.to_string(),
            attempt: key.attempt,
            outcome: key.outcome.as_str().to_owned(),
            platform: key.platform.clone(),
            acquisition_date: key
                .acquisition_date
                .map(|d| d.format("%Y-%m-%d").to_string())
                .unwrap_or_else(|| "unknown".to_owned()),
            reason: r.classification.reason,
            logged_at: r.logged_at.to_rfc3339(),
            superseded: r.superseded.is_some(),
            usage: crate::domain::cost::usage_of(&r.job),
        });
    }
    Ok(facts)
}
