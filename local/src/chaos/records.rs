//! The audit of item records and their history: each granule's record agrees with its
//! outcome, and its history with its record.

use anyhow::{Context, Result};
use granary::domain::item::{HistoryEntry, ItemQuery, ItemRecord};
use granary::domain::layout::items::is_batch_history_key;
use granary::domain::lifecycle::ItemState;
use granary::handlers::Ctx;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Default)]
pub(super) struct RecordAudit {
    pub(super) disagreeing: u64,
    pub(super) history_wrong: u64,
    pub(super) history_missing: u64,
}

/// Reads every item record and every history entry once (batch objects' lines and entries of
/// their own), then checks each granule: a record exists; PROCESSED if it succeeded, in a failed
/// state (PROCESSING_FAILED or ABANDONED, or IGNORE for a file never downloaded) if it was
/// dead-lettered; its history has each sequence
/// number at most once and none past the record's; which of 0..=seq have no entry.
pub(super) async fn audit_records(
    ctx: &Ctx,
    granules: &crate::granule_list::GranuleList,
    successes: &BTreeMap<&str, u32>,
    dead: &BTreeSet<String>,
    note: &mut impl FnMut(&str, String),
) -> Result<RecordAudit> {
    let records: BTreeMap<String, ItemRecord> = ctx
        .items()
        .find(&ItemQuery::default())
        .await?
        .into_iter()
        .map(|r| (r.id.to_string(), r))
        .collect();
    let mut seqs = history_seqs(ctx, &records).await?;
    let mut out = RecordAudit::default();
    for g in granules.iter() {
        let g = g.as_str();
        let Some(record) = records.get(g) else {
            out.disagreeing += 1;
            note("records_disagreeing", format!("{g}: no item record"));
            continue;
        };
        let agrees = if successes.contains_key(g) {
            record.state == ItemState::Processed
        } else if dead.contains(g) {
            // IGNORE: an imported file whose download attempts were spent, told with an item
            // notice; it never reached processing.
            matches!(
                record.state,
                ItemState::ProcessingFailed | ItemState::Abandoned
            ) || (record.state == ItemState::Ignore && record.attempts.processing == 0)
        } else {
            true
        };
        if !agrees {
            out.disagreeing += 1;
            note(
                "records_disagreeing",
                format!(
                    "{g}: {} ({}) at seq {}, last written by {} at {}; succeeded: {}, dead-lettered: {}",
                    record.state,
                    record.reason,
                    record.seq,
                    record.updated_by,
                    record.last_updated.to_rfc3339(),
                    successes.contains_key(g),
                    dead.contains(g),
                ),
            );
        }
        let have = seqs.remove(g).unwrap_or_default();
        check_history(g, record, have, &mut out, note);
    }
    Ok(out)
}

/// The sequence numbers of every item's history entries in objects: batch objects' lines count
/// for the records that name the object.
async fn history_seqs(
    ctx: &Ctx,
    records: &BTreeMap<String, ItemRecord>,
) -> Result<BTreeMap<String, Vec<u32>>> {
    let mut seqs: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for meta in ctx
        .store
        .list(&ctx.config.layout.item_prefixes.history)
        .await?
    {
        let Some(object) = ctx.store.get(&meta.key).await? else {
            continue;
        };
        let batch = is_batch_history_key(&meta.key);
        let lines: Vec<&[u8]> = if batch {
            object.body.split(|b| *b == b'\n').collect()
        } else {
            vec![&object.body[..]]
        };
        for line in lines.into_iter().filter(|l| !l.is_empty()) {
            let entry: HistoryEntry = serde_json::from_slice(line)
                .with_context(|| format!("history entry in {}", meta.key))?;
            // As `Items::history` reads them: a batch object's lines count for the records
            // that name it (lines written for a record the batch then failed to make, which the
            // one-by-one path made instead, are not that record's history).
            let named = records
                .get(entry.item_id.as_str())
                .and_then(|r| r.history_batch.as_ref())
                .is_some_and(|b| b.keys.contains(&meta.key));
            if batch && !named {
                continue;
            }
            seqs.entry(entry.item_id.to_string())
                .or_default()
                .push(entry.seq);
        }
    }
    Ok(seqs)
}

/// Checks one granule's history against its record: each sequence number at most once and none
/// past the record's; which of 0..=seq have no entry. `have` is what the objects hold.
fn check_history(
    g: &str,
    record: &ItemRecord,
    mut have: Vec<u32>,
    out: &mut RecordAudit,
    note: &mut impl FnMut(&str, String),
) {
    // The entries the record holds (its latest write's) and no object has yet, as
    // `Items::history` reads them.
    if !record.in_batch_state() {
        for held in HistoryEntry::held_by(record) {
            if !have.contains(&held.seq) {
                have.push(held.seq);
            }
        }
    }
    have.sort_unstable();
    let total = have.len();
    have.dedup();
    let twice = (total - have.len()) as u64;
    let past = have.iter().filter(|s| **s > record.seq).count() as u64;
    if twice + past > 0 {
        out.history_wrong += twice + past;
        note(
            "history_entries_wrong",
            format!("{g}: {have:?} at seq {}", record.seq),
        );
    }
    let missing = (0..=record.seq)
        .filter(|s| have.binary_search(s).is_err())
        .count() as u64;
    if missing > 0 {
        out.history_missing += missing;
        note(
            "history_entries_missing",
            format!("{g}: has {have:?}, record at seq {}", record.seq),
        );
    }
}
