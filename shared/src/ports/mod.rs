//! What the domain needs from the world. Each port has an AWS adapter and an in-memory twin
//! (`crate::adapters`).

/// An error kept as the cause of a port error (the SDK's own, typically).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

pub mod buckets;
pub mod event_bus;
pub mod job_runner;
pub mod minter;
pub mod object_store;
pub mod queue;
pub mod remote;
pub mod source;

pub use buckets::Buckets;
pub use event_bus::{BusEvent, EventBus, EventBusError};
pub use job_runner::{
    ActiveJobs, JobDescription, JobRequest, JobRunner, JobRunnerError, JobSummary, DESCRIBE_BATCH,
};
pub use minter::{MintError, Minter};
pub use object_store::{
    ListPage, ObjectMeta, ObjectStore, PutCondition, StoreError, StoredObject, Upload,
    LIST_PAGE_KEYS, MIN_PART_BYTES,
};
pub use queue::{OutgoingMessage, Queue, QueueDepth, QueueError, ReceivedMessage};
pub use remote::Remote;
pub use source::{Source, SourceError, SourceFile, SourceStream};
