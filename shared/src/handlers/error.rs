//! The one error every handler returns, and what a Lambda reports when an invocation fails.
//! Lambda puts `errorType` and `errorMessage` in the invocation's error response, its log line
//! and any on-failure destination, so an operator's metric filter or alarm can tell "the
//! inventory is unreadable" from "S3 throttled us" without parsing prose: `errorType` is
//! `<Function>.<cause>` (e.g. `QueueFeeder.Inventory`), the cause one per variant here.

use crate::adapters::parquet::InventoryError;
use crate::config::Function;
use crate::contracts::EncodeError;
use crate::domain::tracker::TrackerError;
use crate::ports::{EventBusError, JobRunnerError, QueueError, SourceError, StoreError};
use crate::repositories::rejects::RejectError;
use crate::repositories::{RecordError, RepositoryError};
use std::error::Error;

#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    /// The invocation's event cannot be acted on (a feeder count of 0).
    #[error("{0}")]
    BadEvent(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    State(#[from] RepositoryError),
    #[error(transparent)]
    Records(#[from] RecordError),
    #[error(transparent)]
    Inventory(#[from] InventoryError),
    #[error(transparent)]
    Tracker(#[from] TrackerError),
    #[error("setting aside a poison input: {0}")]
    Reject(#[from] RejectError),
    #[error("asking Batch: {0}")]
    Batch(#[from] JobRunnerError),
    #[error(transparent)]
    Queue(#[from] QueueError),
    #[error("announcing: {0}")]
    Bus(#[from] EventBusError),
    #[error("listing the source: {0}")]
    Source(#[from] SourceError),
    #[error(transparent)]
    Encode(#[from] EncodeError),
    #[error("serialising a message: {0}")]
    Json(#[from] serde_json::Error),
    /// The feeder stopped short on calls that kept failing past every retry (SubmitJob refused,
    /// item records not written, an invalid row not set aside). What it did is saved (the
    /// tracker moved past every settled window) and is in `summary`; the run still fails, so
    /// Lambda's Errors metric and the feeder's alarm show a campaign that is not moving.
    #[error("feeder stalled: {why} (submitted {} this run)", summary.submitted)]
    Stalled {
        why: String,
        summary: Box<super::feeder::FeederSummary>,
    },
    /// Another delivery or run holds the work (a claim's lease, a routing in progress): the
    /// message comes back after its visibility timeout.
    #[error("{0}; retry later")]
    InFlight(String),
    #[error("item {id} waits for its prerequisites: {why}")]
    Waiting { id: String, why: String },
    /// A setting the work needs is missing (the variable to set is in the message).
    #[error("{0}")]
    NotConfigured(&'static str),
    /// An operator's command that cannot be done (the reason).
    #[error("{0}")]
    Refused(String),
    /// An error while doing `what`.
    #[error("{what}: {source}")]
    During {
        what: String,
        source: Box<HandlerError>,
    },
}

impl HandlerError {
    /// `e`, said to have happened while doing `what`.
    pub fn during(what: impl Into<String>, e: impl Into<HandlerError>) -> Self {
        Self::During {
            what: what.into(),
            source: Box::new(e.into()),
        }
    }

    /// The cause, for `errorType`.
    pub fn kind(&self) -> &'static str {
        use HandlerError::*;
        match self {
            BadEvent(_) => "BadEvent",
            Store(_) => "Store",
            State(_) => "State",
            Records(_) => "Records",
            Inventory(_) => "Inventory",
            Tracker(_) => "Tracker",
            Reject(_) => "Reject",
            Batch(_) => "Batch",
            Queue(_) => "Queue",
            Bus(_) => "Bus",
            Source(_) => "Source",
            Encode(_) | Json(_) => "Encode",
            Stalled { .. } => "Stalled",
            InFlight(_) => "InFlight",
            Waiting { .. } => "Waiting",
            NotConfigured(_) => "NotConfigured",
            Refused(_) => "Refused",
            During { source, .. } => source.kind(),
        }
    }
}

/// The `errorType` and `errorMessage` of a failed invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LambdaFailure {
    pub error_type: String,
    /// The error and every cause under it, each once.
    pub message: String,
}

impl LambdaFailure {
    pub fn of(function: Function, e: &HandlerError) -> Self {
        let mut message = e.to_string();
        let mut cause = e.source();
        while let Some(c) = cause {
            let text = c.to_string();
            if !message.contains(&text) {
                message.push_str(": ");
                message.push_str(&text);
            }
            cause = c.source();
        }
        Self {
            error_type: format!("{function:?}.{}", e.kind()),
            message,
        }
    }
}

#[cfg(feature = "lambda")]
impl From<LambdaFailure> for lambda_runtime::Diagnostic {
    fn from(f: LambdaFailure) -> Self {
        lambda_runtime::Diagnostic {
            error_type: f.error_type,
            error_message: f.message,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_names_its_function_and_cause_and_keeps_the_cause_chain_once() {
        let e = HandlerError::from(StoreError::backend("tracker/tracker.json", "SlowDown"));
        let f = LambdaFailure::of(Function::QueueFeeder, &e);
        assert_eq!(f.error_type, "QueueFeeder.Store");
        assert!(f.message.contains("tracker/tracker.json"), "{}", f.message);
        assert_eq!(f.message.matches("SlowDown").count(), 1, "{}", f.message);
        let bad = HandlerError::BadEvent("granule_submit_count must be at least 1".into());
        assert_eq!(
            LambdaFailure::of(Function::QueueFeeder, &bad).error_type,
            "QueueFeeder.BadEvent"
        );
        // A part's error keeps its cause's kind, and says where it happened.
        let swept = HandlerError::during("sweeper", e);
        let f = LambdaFailure::of(Function::ItemSweeper, &swept);
        assert_eq!(f.error_type, "ItemSweeper.Store");
        assert!(f.message.starts_with("sweeper: "), "{}", f.message);
    }
}
