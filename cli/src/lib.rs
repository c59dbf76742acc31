//! The `granary` CLI's library: operator commands and the local runtime that runs granary on an
//! AWS emulator (stack provisioning, Batch simulator, Lambda runner).

pub mod local;
pub mod ops;
