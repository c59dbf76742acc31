//! What a Lambda reports when an invocation fails. Lambda puts `errorType` and `errorMessage` in
//! the invocation's error response, its log line and any on-failure destination, so an operator's
//! metric filter or alarm can tell "the inventory is unreadable" from "S3 throttled us" without
//! parsing prose. Every handler error names its kind here, as `<part>.<cause>`.

use std::error::Error;

/// A handler error's kind, for `errorType`.
pub trait FailureKind: Error {
    /// `<part>.<cause>`, e.g. `Feeder.Inventory`.
    fn kind(&self) -> &'static str;
}

/// The `errorType` and `errorMessage` of a failed invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LambdaFailure {
    pub error_type: &'static str,
    /// The error and every cause under it, each once.
    pub message: String,
}

impl LambdaFailure {
    pub fn of<E: FailureKind>(e: &E) -> Self {
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
            error_type: e.kind(),
            message,
        }
    }
}

#[cfg(feature = "lambda")]
impl From<LambdaFailure> for lambda_runtime::Diagnostic {
    fn from(f: LambdaFailure) -> Self {
        lambda_runtime::Diagnostic {
            error_type: f.error_type.to_owned(),
            error_message: f.message,
        }
    }
}

impl FailureKind for super::feeder::FeederError {
    fn kind(&self) -> &'static str {
        use super::feeder::FeederError::*;
        match self {
            ZeroCount => "Feeder.BadEvent",
            State(_) => "Feeder.State",
            Store(_) => "Feeder.Store",
            Inventory(_) => "Feeder.Inventory",
            Tracker(_) => "Feeder.Tracker",
            Reject(_) => "Feeder.Reject",
            Jobs(_) => "Feeder.Batch",
            Items(_) => "Feeder.ItemRecords",
            Stalled { .. } => "Feeder.Stalled",
        }
    }
}

impl FailureKind for super::importer::ImportError {
    fn kind(&self) -> &'static str {
        use super::importer::ImportError::*;
        match self {
            Items(_) => "Importer.ItemRecords",
            Queue(_) => "Importer.Queue",
            Source(_) => "Importer.Source",
            Waiting { .. } => "Importer.Waiting",
            NoSource => "Importer.NoSource",
            NoQueue => "Importer.NoQueue",
            Batch(_) => "Importer.Batch",
            Encode(_) => "Importer.Encode",
            Reject(_) => "Importer.Reject",
        }
    }
}

impl FailureKind for super::ingest::IngestStepError {
    fn kind(&self) -> &'static str {
        use super::ingest::IngestStepError::*;
        match self {
            Records(_) => "Ingest.Records",
            Store(_) => "Ingest.Store",
            Claim(_) => "Ingest.Claim",
            Batch(_) => "Ingest.Batch",
            Bus(_) => "Ingest.Bus",
            Queue(_) => "Ingest.Queue",
            Encode(_) => "Ingest.Encode",
            Refused(_) => "Ingest.Refused",
        }
    }
}

impl FailureKind for super::archive::ArchiveError {
    fn kind(&self) -> &'static str {
        use super::archive::ArchiveError::*;
        match self {
            Records(_) => "Archive.Records",
            Store(_) => "Archive.Store",
            Queue(_) => "Archive.Queue",
            Bus(_) => "Archive.Bus",
            Encode(_) => "Archive.Encode",
            Refused(_) => "Archive.Refused",
        }
    }
}

impl FailureKind for super::reconciler::ReconcileError {
    fn kind(&self) -> &'static str {
        match self {
            super::reconciler::ReconcileError::List(_) => "Reconciler.Store",
        }
    }
}

impl FailureKind for super::importer::sweeper::ScheduledPassError {
    fn kind(&self) -> &'static str {
        use super::importer::sweeper::ScheduledPassError::*;
        match self {
            Reconcile(e) => e.kind(),
            Sweep(e) => e.kind(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handlers::feeder::FeederError;
    use crate::ports::StoreError;

    #[test]
    fn a_failure_names_its_part_and_cause_and_keeps_the_cause_chain_once() {
        let e = FeederError::from(StoreError::backend("tracker/tracker.json", "SlowDown"));
        let f = LambdaFailure::of(&e);
        assert_eq!(f.error_type, "Feeder.Store");
        assert!(f.message.contains("tracker/tracker.json"), "{}", f.message);
        assert_eq!(f.message.matches("SlowDown").count(), 1, "{}", f.message);
        assert_eq!(
            LambdaFailure::of(&FeederError::ZeroCount).error_type,
            "Feeder.BadEvent"
        );
    }
}
