//! JSON objects with compare-and-swap: every state object granary keeps in S3 is read with its
//! ETag and written back only if nobody changed it (If-Match), or created only if absent
//! (If-None-Match). S3 answers 412 to a lost condition, which the store port reports as
//! `StoreError::Conflict`.

pub use crate::contracts::{encode, EncodeError};
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

/// Writes `value` under `condition`; `is_conflict()` when the condition fails.
pub async fn write_json<T: Serialize>(
    store: &dyn ObjectStore,
    key: &str,
    value: &T,
    condition: PutCondition,
) -> Result<String, RepositoryError> {
    let body = encode("a state object", value)?;
    Ok(store.put(key, body, condition).await?)
}
