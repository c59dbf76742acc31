//! granary: runs large data-processing campaigns on AWS Batch without losing work.
//!
//! - [`domain`]: pure rules (granule ids, Batch events, classification, log keys, tracker, claims).
//! - [`ports`]: what the rules need from the world; [`adapters`] implement them for AWS and in memory.
//! - [`state`]: the tracker and exactly-once claims, over the object-store port.
//! - [`inventory`]: Parquet inventories, read by window.
//! - [`items`]: the item lifecycle engine: records with compare-and-swap, history, in-flight index.
//! - [`handlers`]: the Lambda handlers (queue feeder, job monitor, requeuer) over ports.

pub mod adapters;
pub mod config;
pub mod domain;
pub mod handlers;
pub mod inventory;
pub mod items;
pub mod ports;
pub mod redrive;
pub mod rejects;
pub mod report_scan;
pub mod state;
pub mod telemetry;
