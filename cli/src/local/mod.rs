//! The local runtime: what AWS would do around granary's Lambdas, done on an emulator.

pub mod campaign;
pub mod chaos;
pub mod emulator;
pub mod events;
pub mod fault_plan;
pub mod in_memory;
pub mod runner;
pub mod runtime_api;
pub mod simulator;
pub mod stack;
