//! Items: `items/<id>.json` (the record), `history/date=<d>/state=<S>/<id>.<seq>.json` (an
//! entry; `_batch.<tag>.jsonl` for a window's entries written together), `inflight/<STATE>/<id>`
//! (the sweeper's index of timed states).

use crate::domain::granule::GranuleId;
use crate::domain::lifecycle::ItemState;
use chrono::{DateTime, Utc};

/// `history/date=YYYY-MM-DD/state=TO/<id>.<seq>.json`: partitioned for Athena by day and the
/// state entered; the sequence number makes each transition its own object.
pub fn history_key(
    prefix: &str,
    at: DateTime<Utc>,
    to: ItemState,
    id: &impl std::fmt::Display,
    seq: u32,
) -> String {
    format!(
        "{prefix}date={}/state={to}/{id}.{seq:05}.json",
        at.format("%Y-%m-%d")
    )
}

/// `history/date=YYYY-MM-DD/state=TO/_batch.<tag>.jsonl`: the entries of many items' transitions
/// into one state, written together (a window's creations), one JSON line each — the Athena
/// table reads lines, so they are rows like any entry. The leading `_batch.` keeps the name
/// apart from `<id>.<seq>.json`.
pub fn batch_history_key(prefix: &str, at: DateTime<Utc>, state: ItemState, tag: &str) -> String {
    format!(
        "{prefix}date={}/state={state}/_batch.{tag}.jsonl",
        at.format("%Y-%m-%d")
    )
}

/// Whether `key` names a batch object made by [`batch_history_key`].
pub fn is_batch_history_key(key: &str) -> bool {
    key.rsplit('/')
        .next()
        .is_some_and(|name| name.starts_with("_batch.") && name.ends_with(".jsonl"))
}

/// `items/<id>.json`: the one object that holds an item's current record.
pub fn record_key(prefix: &str, id: &GranuleId) -> String {
    format!("{prefix}{id}.json")
}

/// `inflight/<STATE>/<id>`: present while an item is in a timed state (DOWNLOADING, PROCESSING),
/// so the sweeper looks only at those items, never at all of them.
pub fn inflight_key(prefix: &str, state: ItemState, id: &GranuleId) -> String {
    format!("{prefix}{state}/{id}")
}

/// `raw/<id>/<name>`: an imported item's file, its name made safe for a key (no `/`, no control
/// characters, never `.`, `..` or empty).
pub fn raw_key(prefix: &str, id: &GranuleId, name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| if c.is_control() || c == '/' { '_' } else { c })
        .collect();
    let name = if cleaned.is_empty() || cleaned == "." || cleaned == ".." {
        "file"
    } else {
        cleaned.as_str()
    };
    format!("{prefix}{id}/{name}")
}
