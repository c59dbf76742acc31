//! Batch and the EventBridge rule as in-memory twins, for a campaign that runs granary's handlers
//! over the in-memory store and queues instead of an emulator.
//!
//! What it is for: measuring granary's own cost per granule. The emulator is one Python process
//! that answers ~150–200 requests a second, so a campaign on it measures the emulator. On the
//! twins the same handlers, the same runner and the same Batch simulator run with nothing slower
//! than granary itself in the loop. Request counts are the same either way (they are counted at
//! granary's ports); only the time changes.

mod batch;
mod jobs;
mod ledger;
mod rule;
#[cfg(test)]
mod tests;

pub use batch::InMemoryBatch;
pub use rule::RuleToQueue;

const ACCOUNT: &str = "000000000000";
const REGION: &str = "us-east-1";
