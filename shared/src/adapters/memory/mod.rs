//! In-memory twins of every port, for unit tests of handlers.

mod buckets;
mod bus;
mod jobs;
mod minter;
mod queue;
mod remote;
mod scratch;
mod shelf;
mod source;
mod store;

pub use buckets::MemoryBuckets;
pub use bus::MemoryEventBus;
pub use jobs::{job_state_change, Ending, FlakyJobRunner, MemoryJobRunner, SPOT_RECLAIM};
pub use minter::{MemoryMinter, MintBehaviour};
pub use queue::MemoryQueue;
pub use remote::MemoryRemote;
pub use scratch::{ScratchFile, Spilled};
pub use source::MemorySource;
pub use store::MemoryStore;
