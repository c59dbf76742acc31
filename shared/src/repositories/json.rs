//! JSON objects with compare-and-swap: every state object granary keeps in S3 is read with its
//! ETag and written back only if nobody changed it (If-Match), or created only if absent
//! (If-None-Match). S3 answers 412 to a lost condition, which the store port reports as
//! `StoreError::Conflict`.

pub use crate::contracts::{encode, EncodeError};
use crate::domain::machine::Refused;
use crate::ports::{JobRunnerError, ObjectStore, PutCondition, StoreError};
use serde::{de::DeserializeOwned, Serialize};

/// What reading or writing a state object can go wrong with.
#[derive(Debug, thiserror::Error)]
pub enum RepositoryError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{key} is not valid JSON for granary ({source}); fix or remove it by hand")]
    Corrupt {
        key: String,
        source: serde_json::Error,
    },
    #[error(transparent)]
    Encode(#[from] EncodeError),
    #[error(transparent)]
    Jobs(#[from] JobRunnerError),
}

impl RepositoryError {
    /// A conditional write lost (the object exists or changed since it was read).
    pub fn is_conflict(&self) -> bool {
        matches!(self, RepositoryError::Store(StoreError::Conflict { .. }))
    }

    /// A store or Batch call that failed in transit or for its rate: worth another try.
    pub fn is_transient(&self) -> bool {
        match self {
            RepositoryError::Store(e) => e.is_transient(),
            RepositoryError::Jobs(e) => !e.may_have_taken_effect,
            RepositoryError::Corrupt { .. } | RepositoryError::Encode(_) => false,
        }
    }
}

/// A value with the ETag it was read at; `etag: None` means it is not stored yet.
#[derive(Debug, Clone, PartialEq)]
pub struct Versioned<T> {
    pub value: T,
    pub etag: Option<String>,
}

impl<T> Versioned<T> {
    pub fn condition(&self) -> PutCondition {
        match &self.etag {
            Some(etag) => PutCondition::IfMatch(etag.clone()),
            None => PutCondition::IfAbsent,
        }
    }
}

pub async fn read_json<T: DeserializeOwned>(
    store: &dyn ObjectStore,
    key: &str,
) -> Result<Option<Versioned<T>>, RepositoryError> {
    let Some(obj) = store.get(key).await? else {
        return Ok(None);
    };
    let value = serde_json::from_slice(&obj.body).map_err(|e| RepositoryError::Corrupt {
        key: key.to_owned(),
        source: e,
    })?;
    Ok(Some(Versioned {
        value,
        etag: Some(obj.etag),
    }))
}

/// The names of the JSON records directly under `prefix` (`<prefix><name>.json`), sorted.
pub async fn record_names(
    store: &dyn ObjectStore,
    prefix: &str,
) -> Result<Vec<String>, StoreError> {
    let mut names: Vec<String> = store
        .list(prefix)
        .await?
        .into_iter()
        .filter_map(|m| {
            Some(
                m.key
                    .strip_prefix(prefix)?
                    .strip_suffix(".json")?
                    .to_owned(),
            )
        })
        .collect();
    names.sort();
    Ok(names)
}

/// [`read_json`], tried again after a backoff while the read is refused (throttled past the
/// SDK's retries): for a caller that would otherwise redo a whole sequence of calls for one.
pub async fn read_json_retrying<T: DeserializeOwned>(
    store: &dyn ObjectStore,
    key: &str,
    what: &str,
) -> Result<Option<Versioned<T>>, RepositoryError> {
    crate::retry::again(
        crate::retry::Backoff::IN_RUN,
        what,
        || read_json(store, key),
        RepositoryError::is_transient,
    )
    .await
}

/// Writes `value` under `condition`; `is_conflict()` when the condition fails. For a state
/// object read at an ETag, the object being gone since (S3's 404 to If-Match) is a change like
/// any other: the caller reads again and finds it missing.
pub async fn write_json<T: Serialize>(
    store: &dyn ObjectStore,
    key: &str,
    value: &T,
    condition: PutCondition,
) -> Result<String, RepositoryError> {
    let body = encode("a state object", value)?;
    let if_match = matches!(condition, PutCondition::IfMatch(_));
    match store.put(key, body, condition).await {
        Err(StoreError::NotFound { key }) if if_match => {
            Err(RepositoryError::Store(StoreError::Conflict { key }))
        }
        result => Ok(result?),
    }
}

/// [`write_json`], tried again after a backoff when the write was refused (a refusal did
/// nothing). A write whose answer was lost comes back as a conflict on the retry, which every
/// caller already reads as "changed or made before": the one in-run retry of a state write.
pub async fn write_json_retrying<T: Serialize>(
    store: &dyn ObjectStore,
    key: &str,
    value: &T,
    condition: PutCondition,
    what: &str,
) -> Result<String, RepositoryError> {
    crate::retry::again(
        crate::retry::Backoff::IN_RUN,
        what,
        || write_json(store, key, value, condition.clone()),
        RepositoryError::is_transient,
    )
    .await
}

/// How often a change is re-decided after losing a compare-and-swap before giving up (the
/// feeder's window, the monitor and the reconciler may all change one item record at once).
pub const CAS_ROUNDS: usize = 16;

/// What a compare-and-swap change found.
#[derive(Debug, Clone, PartialEq)]
pub enum Changed<T> {
    Moved(T),
    /// The decision was "nothing to do" for the record as it is.
    Unchanged(T),
    Missing,
}

impl<T> Changed<T> {
    pub fn record(&self) -> Option<&T> {
        match self {
            Changed::Moved(r) | Changed::Unchanged(r) => Some(r),
            Changed::Missing => None,
        }
    }
}

/// Why a record of a workflow (an item, an ingest job or batch, an archive job or task) could
/// not be read or changed: one error for every repository built on [`change_record`].
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error(transparent)]
    Repository(#[from] RepositoryError),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The change its table does not allow.
    #[error("{0}")]
    Illegal(String),
    #[error("{what} {id} changed {CAS_ROUNDS} times while we tried to update it; retry later")]
    Contended { what: &'static str, id: String },
}

impl RecordError {
    /// A store call that failed in transit or for its rate, or a record others kept changing:
    /// worth another try later.
    pub fn is_transient(&self) -> bool {
        match self {
            RecordError::Repository(e) => e.is_transient(),
            RecordError::Store(e) => e.is_transient(),
            RecordError::Contended { .. } => true,
            RecordError::Illegal(_) => false,
        }
    }

    /// A refused call, which did nothing: the change may be decided again on a fresh read.
    /// (Not a contention: [`change_record`] has re-decided that one enough.)
    pub fn is_refused_call(&self) -> bool {
        matches!(self, RecordError::Repository(_) | RecordError::Store(_)) && self.is_transient()
    }

    /// The record is there but is not valid JSON for granary.
    pub fn corrupt(&self) -> Option<(&str, &serde_json::Error)> {
        match self {
            RecordError::Repository(RepositoryError::Corrupt { key, source }) => {
                Some((key, source))
            }
            _ => None,
        }
    }
}

/// Which record [`change_record`] changes, for its errors: "an ingest job" and its id.
#[derive(Clone, Copy)]
pub struct RecordAt<'a> {
    pub key: &'a str,
    pub what: &'static str,
    pub id: &'a str,
}

/// What a change of a record owes beyond the record itself (its index markers, its history
/// entries), in the order a crash between any two calls cannot strand: [`Followers::before`]
/// runs ahead of the If-Match write, [`Followers::after`] once it won, and
/// [`Followers::unchanged`] when the decision was to do nothing (where a dead writer's debts
/// are paid). Each must be idempotent: a lost race runs `before` again on the next round.
#[allow(async_fn_in_trait)] // Only ever called with concrete types, whose futures are Send.
pub trait Followers<T> {
    async fn before(&self, _current: &T, _next: &T) -> Result<(), RecordError> {
        Ok(())
    }
    async fn after(&self, _current: &T, _next: &T) -> Result<(), RecordError> {
        Ok(())
    }
    async fn unchanged(&self, _current: &T) -> Result<(), RecordError> {
        Ok(())
    }
}

/// A record nothing follows (`&()` as the followers).
impl<T> Followers<T> for () {}

/// Index markers that move with a record (`moving(before, after)`: the new ones put before the
/// old ones go, so a crash leaves a record listed twice at worst, which its lister repairs).
/// They move after the write, unless `first(before, after)`: a record leaving a state no scan
/// lists would otherwise be left, after a crash between the two, a live record no marker names.
pub struct Markers<P, M> {
    pub first: P,
    pub moving: M,
}

impl<T, P, M, Fut> Followers<T> for Markers<P, M>
where
    P: Fn(&T, &T) -> bool,
    M: Fn(&T, &T) -> Fut,
    Fut: std::future::Future<Output = Result<(), StoreError>>,
{
    async fn before(&self, current: &T, next: &T) -> Result<(), RecordError> {
        if (self.first)(current, next) {
            (self.moving)(current, next).await?;
        }
        Ok(())
    }
    async fn after(&self, current: &T, next: &T) -> Result<(), RecordError> {
        if !(self.first)(current, next) {
            (self.moving)(current, next).await?;
        }
        Ok(())
    }
}

/// The one record protocol: reads the record, asks `decide` for its next value (`None`: nothing
/// to do; `Err`: a change its table refuses), writes it with If-Match, with what `followers`
/// owe around the write; on a lost race, reads and decides again (at most [`CAS_ROUNDS`] times).
pub async fn change_record<T, F>(
    store: &dyn ObjectStore,
    at: RecordAt<'_>,
    decide: F,
    followers: &impl Followers<T>,
) -> Result<Changed<T>, RecordError>
where
    T: Serialize + DeserializeOwned,
    F: Fn(&T) -> Result<Option<T>, Refused>,
{
    for _ in 0..CAS_ROUNDS {
        let Some(current) = read_json::<T>(store, at.key).await? else {
            return Ok(Changed::Missing);
        };
        let Some(next) = decide(&current.value).map_err(|r| RecordError::Illegal(r.why))? else {
            followers.unchanged(&current.value).await?;
            return Ok(Changed::Unchanged(current.value));
        };
        followers.before(&current.value, &next).await?;
        match write_json(store, at.key, &next, current.condition()).await {
            Ok(_) => {
                followers.after(&current.value, &next).await?;
                return Ok(Changed::Moved(next));
            }
            Err(e) if e.is_conflict() => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(RecordError::Contended {
        what: at.what,
        id: at.id.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::memory::MemoryStore;

    #[tokio::test]
    async fn a_state_object_deleted_since_it_was_read_is_a_lost_condition() {
        let store = MemoryStore::new();
        let etag = write_json(&store, "k", &1u32, PutCondition::IfAbsent)
            .await
            .unwrap();
        store.delete("k").await.unwrap();
        let e = write_json(&store, "k", &2u32, PutCondition::IfMatch(etag))
            .await
            .unwrap_err();
        assert!(e.is_conflict(), "{e}");
        // change_record reads again and finds it missing.
        let at = RecordAt {
            key: "k",
            what: "a number",
            id: "k",
        };
        let changed = change_record::<u32, _>(&store, at, |v| Ok(Some(v + 1)), &())
            .await
            .unwrap();
        assert!(matches!(changed, Changed::Missing));
    }
}
