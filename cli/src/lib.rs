//! The `granary` CLI's library: what the operator commands compute (status, report, chart), apart
//! from how they print it.
#![cfg_attr(test, allow(clippy::too_many_lines))]

pub mod convert;
pub mod ops;
