//! Wire contracts: the shapes granary writes in one place and reads in another, across a queue or
//! a Batch job. Each is written and read only through its module, so a change to one is a change in
//! one file.
//!
//! - [`messages`]: retry-queue, failure-DLQ and import-queue messages, their attributes and the
//!   one list of reasons a message is dead-lettered or retried ([`messages::Outcome`]).
//! - [`job`]: what a submitted Batch job carries (GRANULE_ID / ATTEMPT) and how it is read back.

pub mod archive;
pub mod ingest;
pub mod job;
pub mod messages;

use serde::Serialize;

/// One of granary's own values could not be written as JSON (a serialiser refused it); an error,
/// never an empty body.
#[derive(Debug, thiserror::Error)]
#[error("{what} could not be encoded as JSON: {source}")]
pub struct EncodeError {
    pub what: &'static str,
    pub source: serde_json::Error,
}

/// The JSON bytes of `value`; `what` names it in the error.
pub fn encode<T: Serialize>(what: &'static str, value: &T) -> Result<bytes::Bytes, EncodeError> {
    serde_json::to_vec(value)
        .map(bytes::Bytes::from)
        .map_err(|source| EncodeError { what, source })
}

/// The JSON text of `value` (a message body); `what` names it in the error.
pub fn encode_text<T: Serialize>(what: &'static str, value: &T) -> Result<String, EncodeError> {
    serde_json::to_string(value).map_err(|source| EncodeError { what, source })
}
