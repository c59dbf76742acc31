//! The local runtime: what AWS would do around granary's Lambdas, done on an emulator.

pub mod events;
pub mod stack;
