//! One decorator for every port, and a [`Tap`] that sees each external call through it: before
//! the call (to refuse it, or to let it happen and lose its answer) and after it (what came back).
//! Request counting ([`counting`]), injected faults ([`faults`]) and the IAM
//! access log ([`access_log`]) are taps. Rooms: [`call`] (what a tap sees and decides), [`tapped`] (the
//! decorators, written once).

pub mod access_log;
pub mod counting;
pub mod faults;

mod call;
mod tapped;

pub use call::{Answer, Call, Fate, Op, Refusal, Tap};
pub use tapped::{
    TappedBuckets, TappedBus, TappedJobs, TappedMinter, TappedQueue, TappedRemote, TappedSource,
    TappedStore,
};
