//! granary: runs large data-processing campaigns on AWS Batch without losing work.
//!
//! One engine runs three workflows (the backfill's items, ingest batches and jobs, archive jobs):
//! a record's state moves only through its table (`domain::machine`), what follows a state is a
//! named pure decision returning a `Move` (`domain::<workflow>::decisions`), a handler writes it
//! with the one record protocol (`repositories::json::change_record`), and every Batch job goes
//! through the one submission (`repositories::submission`).
//!
//! - [`domain`]: pure rules — the kernel (`machine`), the item lifecycle (`lifecycle`), the ingest
//!   queue (`ingest`) and archive jobs (`archive`) with their decisions, every S3 key (`layout`),
//!   granule ids, Batch events and their classification, claims and windows, the tracker, poison
//!   inputs.
//! - [`contracts`]: wire shapes written in one place and read in another (queue messages and their
//!   outcomes, the Batch job contract, ingest and archive events).
//! - [`ports`]: what the rules need from the world; [`adapters`] implement them (AWS, in memory,
//!   Parquet inventories, HTTP sources, taps that count, fault or log calls).
//! - [`repositories`]: state objects over the object store (the record protocol, the submission
//!   protocol, tracker, hold, items, logs, rejects, ingest, archive).
//! - [`handlers`]: the ten Lambdas' handlers and the operators' actions over ports, and the one
//!   `HandlerError`.
//! - [`config`]: settings from the environment, by section.
//! - [`budget`]: how long an invocation may still work, shared among its passes.
//! - [`clock`]: the one clock (the wall clock, or a simulation's virtual time).
//! - [`retry`]: the one in-run retry (bounded, with jittered exponential backoff).
//! - [`mutants`]: deliberate defects for showing the proof fails without each rule (test-only
//!   feature).
//! - [`wiring`]: the one place that builds AWS adapters from the environment.
#![cfg_attr(test, allow(clippy::too_many_lines))]

pub mod adapters;
pub mod budget;
pub mod clock;
pub mod config;
pub mod contracts;
pub mod domain;
pub mod handlers;
pub mod metrics;
pub mod mutants;
pub mod ports;
pub mod repositories;
pub mod retry;
pub mod wiring;
