//! Where everything lives in granary's bucket: the one module that builds and parses S3 keys.
//! README's "S3 layout" table lists each kind of key with an example this module builds
//! (`shared/tests/readme_layout.rs` checks the two agree). The prefixes are configuration
//! (`config::sections::Layout`, `GRANARY_*_PREFIX`); the shapes under them are these.
//!
//! - [`claims`]: a later attempt's claim and a feeder window's, and their open-claims markers;
//! - [`items`]: item records, history entries and batches, the in-flight index;
//! - [`logs`]: the outcome logs (hive-partitioned for Athena) and their bodies;
//! - [`ingest`]: the ingest queue's records, indexes, holds, claims, files, catalog, reports;
//! - [`archive`]: archive jobs, their open index, shards, tasks and staged archive;
//! - [`reject_key`]: poison inputs set aside.

pub mod archive;
pub mod claims;
pub mod ingest;
pub mod items;
pub mod logs;

/// `rejects/kind=<kind>/<id>.json`: a poison input set aside (`repositories::rejects`), its id
/// a hash of where it came from and what it was.
pub fn reject_key(prefix: &str, kind: &str, id: &str) -> String {
    format!("{prefix}kind={kind}/{id}.json")
}
