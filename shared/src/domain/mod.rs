//! Pure rules: no I/O, no AWS. Everything here is unit-tested on its own.
//!
//! - the kernel: [`machine`] (states and tables, the one `moved`, the `Move` a decision returns);
//! - the workflows on it: [`lifecycle`] and [`item`] (the backfill's items; [`item_steps`] the
//!   status of each step, read from the history), [`ingest`],
//!   [`archive`], each with its `decisions`;
//! - a granule's retries: [`attempt_budget`];
//! - submissions: [`claim`] (the claim protocol's shapes; one job), [`window`] (a feeder window),
//!   [`job_name`] and [`job_tags`] (what a Batch job is called and carries);
//! - Batch's side: [`batch_event`] (its events), [`classify`] (how a job ended), [`job_end`]
//!   (what an event decides), [`retry_strategy`];
//! - where things live: [`layout`] (every S3 key), [`campaign`] (whose state it is);
//! - the feeder's: [`granule`] (ids), [`tracker`], [`hold`], [`brake`] (the monitor's automatic hold), [`downstream`] (pacing by what
//!   comes after), [`progress`], [`report`], [`cost`];
//! - [`poison`]: inputs set aside; [`file_format`]: a stored file is the kind its name says.

pub mod archive;
pub mod attempt_budget;
pub mod audit;
pub mod batch_event;
pub mod brake;
pub mod campaign;
pub mod cancel;
pub mod claim;
pub mod classify;
pub mod cost;
pub mod downstream;
pub mod file_format;
pub mod granule;
pub mod hold;
pub mod ingest;
pub mod item;
pub mod item_steps;
pub mod job_end;
pub mod job_name;
pub mod job_tags;
pub mod layout;
pub mod lifecycle;
pub mod machine;
pub mod memory;
pub mod metrics;
pub mod pace;
pub mod pattern;
pub mod percent;
pub mod plan;
pub mod poison;
pub mod progress;
pub mod report;
pub mod retry_strategy;
pub mod tracker;
pub mod window;
