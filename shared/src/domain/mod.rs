//! Pure rules: no I/O, no AWS. Everything here is unit-tested on its own.

pub mod archive;
pub mod batch_event;
pub mod claim;
pub mod classify;
pub mod granule;
pub mod hold;
pub mod ingest;
pub mod item;
pub mod job_end;
pub mod job_name;
pub mod job_tags;
pub mod layout;
pub mod lifecycle;
pub mod machine;
pub mod poison;
pub mod progress;
pub mod report;
pub mod retry_strategy;
pub mod tracker;
pub mod window;
