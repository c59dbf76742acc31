//! The ingest queue (design document 004): batches of jobs from a depositor's manifest, each job
//! an object to download, process, record and announce. Pure: the tables, the decisions each
//! step makes, the manifest format and the index keys. The records live in
//! `repositories::ingest`; the steps in `handlers::ingest`.

pub mod batch;
pub mod decisions;
pub mod deposit;
pub mod index;
pub mod job;
pub mod manifest;
pub mod record;

pub use batch::BatchState;
pub use job::JobState;
