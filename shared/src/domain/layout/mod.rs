//! Where everything lives in granary's bucket: the one module that builds and parses S3 keys.
//! README's "S3 layout" table lists each kind of key with an example this module builds
//! (`shared/tests/s3_layout_doc.rs` checks the two agree). The prefixes are the constants
//! below, not settings: the roles' grants in infra/template.yaml are written for them, so a
//! stack that moved one would be refused by its own policies. A named campaign's state moves
//! under `campaigns/<name>/` (`config::Layout::in_campaign`); the shapes under them are these.
//!
//! - [`claims`]: a later attempt's claim and a feeder window's, and their open-claims markers;
//! - [`items`]: item records, history entries and batches, the in-flight index;
//! - [`logs`]: the outcome logs (hive-partitioned for Athena) and their bodies;
//! - [`ingest`]: the ingest queue's records, indexes, holds, claims, files, catalog, reports;
//! - [`archive`]: archive jobs, their open index, shards, tasks and staged archive;
//! - [`reject_key`]: poison inputs set aside.

pub mod archive;
pub mod claims;

/// The inventories the feeder reads, in key order.
pub const INVENTORY_PREFIX: &str = "inventories/";
/// The feeder's tracker: which inventory row comes next.
pub const TRACKER_KEY: &str = "tracker/tracker.json";
/// While this object exists the feeder submits nothing (`granary hold` / `granary release`).
pub const HOLD_KEY: &str = "holds/feeder.json";
/// The outcome logs, hive-partitioned for Athena.
pub const LOG_PREFIX: &str = "logs/";
/// Submission claims: later attempts' and feeder windows'.
pub const CLAIM_PREFIX: &str = "claims/";
/// One marker per submitted attempt whose end is not yet logged and routed.
pub const OPEN_CLAIM_PREFIX: &str = "open-claims/";
/// Poison inputs kept with their reason before they are dead-lettered.
pub const REJECT_PREFIX: &str = "rejects/";
/// Item records.
pub const ITEM_PREFIX: &str = "items/";
/// Item history entries.
pub const HISTORY_PREFIX: &str = "history/";
/// The in-flight index of items being downloaded or processed.
pub const INFLIGHT_PREFIX: &str = "inflight/";
/// Raw files the importer downloaded.
pub const RAW_PREFIX: &str = "raw/";
/// The ingest queue's records, indexes and files.
pub const INGEST_PREFIX: &str = "ingest/";
/// Archive jobs, their shards and tasks.
pub const ARCHIVE_PREFIX: &str = "archive/";
pub mod ingest;
pub mod items;
pub mod logs;

/// `rejects/kind=<kind>/<id>.json`: a poison input set aside (`repositories::rejects`), its id
/// a hash of where it came from and what it was.
pub fn reject_key(prefix: &str, kind: &str, id: &str) -> String {
    format!("{prefix}kind={kind}/{id}.json")
}
