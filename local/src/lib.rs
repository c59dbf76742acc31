//! granary's local runtime: what AWS does around granary's Lambdas, done on an emulator or in
//! memory — the stack (buckets, queues, the template's resources), the Batch simulator and the
//! in-memory Batch, the Lambda runner with the Runtime API, the campaign, chaos and the demo.
//! Nothing here ships to AWS; the operator's `granary` does not link it.
#![cfg_attr(test, allow(clippy::too_many_lines))]

pub mod campaign;
pub mod chaos;
pub mod emulator;
pub mod events;
pub mod fault_plan;
pub mod granule_list;
pub mod in_memory;
pub mod runner;
pub mod runtime_api;
pub mod simulate;
pub mod simulator;
pub mod stack;
