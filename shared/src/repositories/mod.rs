//! Repositories: granary's state objects over the object-store port, each with its protocol.
//!
//! - [`json`]: read with ETag, write with If-Match / If-None-Match (the compare-and-swap all
//!   others use).
//! - [`tracker`]: the feeder's progress through its inventories.
//! - [`hold`]: the feeder's hold.
//! - [`submission`]: the one Batch submission protocol (claim, SubmitJob once, record, takeover
//!   after the lease with a lookup by name), over a claim of one job or of a window.
//! - [`claims`]: claims of one job (a later attempt, an ingest processing attempt).
//! - [`windows`]: the feeder's windows of first attempts (one claim a window).
//! - [`ingest_files`]: what an ingest job stores beside its records (bindings, the stored
//!   object, its manifest).
//! - [`items`]: item records, their history and the in-flight index.
//! - [`logs`]: the log objects: the monitor's write-then-route protocol and the report scan.
//! - [`rejects`]: poison inputs, recorded and dead-lettered.
//! - [`objects`]: the data objects granary moves and checks but keeps no state in (granules'
//!   files, archive members, an operator's source bucket): streamed copies, digests, checks.

pub mod archive;
pub mod cancels;
pub mod claims;
pub mod hold;
pub mod ingest;
pub mod ingest_files;
pub mod items;
pub mod json;
pub mod logs;
pub mod objects;
pub mod pace;
pub mod rejects;
pub mod submission;
pub mod tracker;
pub mod windows;

pub use cancels::CancelledList;
pub use claims::{
    park_once, submit_claim_once, submit_once, AttemptAt, Claims, ParkOutcome, SubmitOutcome,
};
pub use hold::HoldObject;
pub use json::{read_json, write_json, RecordError, RepositoryError, Versioned};
pub use submission::{JobSubmission, Submission, Submitted, Submitter};
pub use tracker::{Inventories, TrackerObject};
