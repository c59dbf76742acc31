//! The `granary` CLI's library: what the operator commands compute (status, report, chart), apart
//! from how they print it.

pub mod convert;
pub mod ops;
