//! granary: runs large data-processing campaigns on AWS Batch without losing work.
//!
//! - [`domain`]: pure rules — granule ids, Batch events, classification, the item lifecycle table
//!   and the decisions beside it, log keys, the tracker, claims.
//! - [`contracts`]: wire shapes written in one place and read in another (queue messages and their
//!   outcomes, the Batch job contract).
//! - [`ports`]: what the rules need from the world; [`adapters`] implement them (AWS, in memory,
//!   Parquet inventories, HTTP sources, taps that count, fault or log calls).
//! - [`repositories`]: state objects over the object store (JSON CAS, tracker, hold, claims, items,
//!   logs, rejects).
//! - [`handlers`]: the Lambda handlers and operator actions over ports.
//! - [`config`]: settings from the environment, by section.
//! - [`budget`]: how long an invocation may still work, shared among its passes.
//! - [`retry`]: the one in-run retry (bounded, with jittered exponential backoff).
//! - [`mutants`]: deliberate defects for showing the proof fails without each rule (test-only
//!   feature).
//! - [`wiring`]: the one place that builds AWS adapters from the environment.

pub mod adapters;
pub mod budget;
pub mod config;
pub mod contracts;
pub mod domain;
pub mod handlers;
pub mod mutants;
pub mod ports;
pub mod repositories;
pub mod retry;
pub mod wiring;
