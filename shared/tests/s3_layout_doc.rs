//! docs/architecture.md's "S3 layout" table against the one module that builds keys (`domain::layout`): each
//! row's example key must be what the layout builds for that kind of object under the default
//! prefixes, and every kind the layout builds must have its row. A key shape changed in code and
//! not in that table (or the reverse) fails here.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

use chrono::{TimeZone, Utc};
use granary::config::{Config, Section};
use granary::domain::archive::job::Phase;
use granary::domain::granule::{GranuleId, GranuleProcessingEvent};
use granary::domain::ingest::batch::BatchState;
use granary::domain::ingest::index::BatchId;
use granary::domain::ingest::job::{BatchGroup, JobState};
use granary::domain::layout::archive::ArchiveKeys;
use granary::domain::layout::claims::{claim_key, window_key};
use granary::domain::layout::ingest::IngestKeys;
use granary::domain::layout::items::{
    batch_history_key, history_key, inflight_key, raw_key, record_key,
};
use granary::domain::layout::logs::{LogKey, LogOutcome};
use granary::domain::layout::reject_key;
use granary::domain::lifecycle::ItemState;
use granary::domain::poison::RejectKind;
use std::collections::BTreeMap;

/// Every kind of object and the key the layout builds for the example of it.
fn built() -> BTreeMap<&'static str, String> {
    let config = Config::for_sections(&[Section::Layout, Section::Importer], |k| {
        (k == "GRANARY_BUCKET").then(|| "b".to_owned())
    })
    .unwrap();
    let layout = &config.layout;
    let items = &layout.item_prefixes;
    let id = GranuleId::parse("HLS.S30.T18TYN.2022002T153012.v2.0").unwrap();
    let retry = GranuleProcessingEvent {
        granule_id: id.clone(),
        attempt: 2,
    };
    let at = Utc.with_ymd_and_hms(2026, 11, 26, 7, 0, 0).unwrap();
    let facts = layout.id_parser.facts(&id);
    let log = LogKey::new(LogOutcome::Success, &facts, &id, 2);
    let ingest = IngestKeys::new(granary::config::ingest::DEFAULT_INGEST_PREFIX);
    let bid = BatchId::parse("b20261126070000-0a1b2c3d").unwrap();
    let jid = bid.job(1);
    let archive = ArchiveKeys::new(granary::config::archive::DEFAULT_ARCHIVE_PREFIX);
    let inventory = format!("{}2026-11-26.parquet", layout.inventory_prefix);
    BTreeMap::from([
        ("inventory", inventory.clone()),
        ("tracker", layout.tracker_key.clone()),
        ("feeder hold", layout.hold_key.clone()),
        (
            "window claim",
            window_key(&layout.claim_prefix, &inventory, 400),
        ),
        (
            "window open marker",
            window_key(&layout.open_claim_prefix, &inventory, 400),
        ),
        ("attempt claim", claim_key(&layout.claim_prefix, &retry)),
        (
            "attempt open marker",
            claim_key(&layout.open_claim_prefix, &retry),
        ),
        (
            "parked retry",
            granary::domain::layout::claims::parked_key(&layout.claim_prefix, &retry),
        ),
        (
            "window of retries",
            window_key(
                &layout.claim_prefix,
                granary::domain::window::RETRY_WINDOWS,
                7,
            ),
        ),
        (
            "cancel record",
            granary::domain::layout::claims::cancel_record_key(
                &layout.claim_prefix,
                "c20261126T070000-0a1b2c3d",
            ),
        ),
        (
            "cancelled attempt",
            granary::domain::layout::claims::cancelled_key(&layout.claim_prefix, &retry),
        ),
        ("outcome log", log.to_key(&layout.log_prefix)),
        ("item record", record_key(&items.items, &id)),
        (
            "history entry",
            history_key(&items.history, at, ItemState::Processing, &id, 3),
        ),
        (
            "history batch",
            batch_history_key(&items.history, at, ItemState::Ready, "w"),
        ),
        (
            "in-flight marker",
            inflight_key(&items.inflight, ItemState::Processing, &id),
        ),
        (
            "imported file",
            raw_key(&config.importer.raw_prefix, &id, "scene.tif"),
        ),
        (
            "rejected input",
            reject_key(
                &layout.reject_prefix,
                RejectKind::InvalidInventoryRow.as_str(),
                "0f1e2d3c",
            ),
        ),
        ("ingest batch", ingest.batch(&bid)),
        (
            "ingest batch queue",
            ingest.batch_state(BatchState::Pending, &bid),
        ),
        ("ingest job", ingest.job(&jid)),
        (
            "ingest job queue",
            ingest.job_state(JobState::Pending, 5, &jid),
        ),
        (
            "ingest batch index",
            ingest.batch_group(&bid, BatchGroup::Processing, &jid),
        ),
        ("ingest hold", ingest.collection_hold("maps")),
        (
            "ingest processing claim",
            ingest.processing_claim(&jid, 0, 1),
        ),
        ("ingest file", ingest.object(&jid, "scene.tif")),
        ("ingest catalog", ingest.catalog("maps", &jid)),
        (
            "ingest storage",
            format!(
                "{}{}",
                ingest.storage(
                    "maps",
                    &granary::domain::ingest::deposit::storage_name(
                        Some("ark:/99999/fk4x"),
                        jid.as_str()
                    )
                ),
                granary::domain::ingest::deposit::STORAGE_MANIFEST
            ),
        ),
        ("ingest local id", ingest.local_id("maps", "sheet-12")),
        ("ingest report", ingest.report(&bid, 1)),
        ("ingest manifest", ingest.manifest("m.txt")),
        ("archive job", archive.job_key("a-1")),
        ("archive open marker", archive.open_key("a-1")),
        ("archive shard", archive.shard_key("a-1", 0)),
        (
            "archive task",
            archive.task_key("a-1", Phase::Store, "dest-00"),
        ),
        ("archive staged", archive.staged("a-1")),
        ("archive temporary", archive.tmp("a-1")),
    ])
}

/// The table under docs/architecture.md's "S3 layout" heading: kind → example key.
fn readme_table() -> BTreeMap<String, String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/architecture.md");
    let text = std::fs::read_to_string(path).unwrap();
    let start = text
        .find("### S3 layout")
        .expect("docs/architecture.md has an S3 layout section");
    text[start..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2) // the header and its rule
        .map(|row| {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let key = cells[2].trim_matches('`').to_owned();
            (cells[1].to_owned(), key)
        })
        .collect()
}

#[test]
fn the_documented_s3_layout_is_what_the_layout_module_builds() {
    let built = built();
    let table = readme_table();
    for (kind, key) in &built {
        assert_eq!(
            table.get(*kind),
            Some(key),
            "the S3 layout row for {kind:?} (the layout builds {key})"
        );
    }
    for kind in table.keys() {
        assert!(
            built.contains_key(kind.as_str()),
            "the S3 layout names {kind:?}, which the layout does not build"
        );
    }
}

/// Prints the rows for the table (`cargo test --test s3_layout_doc -- --ignored --nocapture`).
#[test]
#[ignore]
fn print_rows() {
    for (kind, key) in built() {
        println!("| {kind} | `{key}` |");
    }
}
