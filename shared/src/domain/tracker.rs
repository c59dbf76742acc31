//! The granule tracker: how far the feeder has got through an ordered list of inventories.
//! Pure data and rules here; reading and writing it with ETags lives in `state::tracker_store`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Where the pages of a stretch of an inventory are: the file's metadata trimmed to the row
/// groups covering `first_row .. first_row + rows`, with the id column's offset index only, in
/// Parquet's own footer encoding. The feeder keeps it in the tracker, so the next windows of the
/// stretch read their pages with one GET each instead of the footer, the file's whole page index
/// and then the pages (3 GETs, ~665 KB at 10M rows). Only files with an offset index have one (made by `adapters::parquet::Inventory::page_map`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageMap {
    /// The first row of the first row group kept.
    pub first_row: u64,
    /// Rows in the row groups kept.
    pub rows: u64,
    /// The whole file's row count.
    pub total_rows: u64,
    /// The trimmed metadata (footer and offset index), base64.
    pub metadata: String,
}

impl PageMap {
    /// Whether rows `start .. start + n` (clamped to the file's end) lie inside the map.
    pub fn covers(&self, start: u64, n: u64) -> bool {
        let end = start.saturating_add(n).min(self.total_rows);
        self.first_row <= start && end <= self.first_row + self.rows
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InventoryProgress {
    /// Object key of the Parquet inventory.
    pub key: String,
    /// Row count, learnt from the file's footer the first time the feeder opens it.
    #[serde(default)]
    pub total_rows: Option<u64>,
    pub rows_submitted: u64,
    /// Where the next windows' pages are (see [`PageMap`]), once the feeder has opened the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_map: Option<PageMap>,
    /// The inventory's ETag when the tracker took it up: the file the rows counted so far are
    /// of. Another object under the same key is another list of granules ([`Tracker::replaced`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
}

impl InventoryProgress {
    pub fn is_complete(&self) -> bool {
        self.total_rows.is_some_and(|t| self.rows_submitted >= t)
    }

    pub fn remaining(&self) -> Option<u64> {
        self.total_rows
            .map(|t| t.saturating_sub(self.rows_submitted))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Tracker {
    pub inventories: Vec<InventoryProgress>,
    #[serde(default)]
    pub updated_at: Option<DateTime<Utc>>,
    /// (time, rows submitted in all) after feeder runs that moved: what `granary status`
    /// measures throughput and the ETA from.
    #[serde(default)]
    pub samples: Vec<crate::domain::progress::Sample>,
    /// Windows of parked retries the feeder has finished: the next is this number
    /// (`GRANARY_ARRAY_RETRIES`, `handlers::feeder::retries`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retry_windows: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrackerError {
    #[error("inventory {0:?} is not in the tracker")]
    UnknownInventory(String),
    #[error("inventory {key:?}: cannot move from row {from} to row {to} (total {total:?}); the tracker only moves forward")]
    BadAdvance {
        key: String,
        from: u64,
        to: u64,
        total: Option<u64>,
    },
    #[error("inventory {key:?} was recorded with {recorded} rows but its file now has {found}; inventories must not change once fed")]
    TotalChanged {
        key: String,
        recorded: u64,
        found: u64,
    },
}

impl Tracker {
    /// Adds inventories not yet tracked, in key order, after the ones already there. Returns how
    /// many were added. Known inventories keep their place and progress.
    pub fn add_inventories<I: IntoIterator<Item = String>>(&mut self, keys: I) -> usize {
        self.add_listed(keys.into_iter().map(|k| (k, None)))
    }

    /// [`Tracker::add_inventories`] from a listing: each new inventory pinned to the ETag it was
    /// listed with, and an inventory taken up before pins were kept pinned now.
    pub fn add_listed<I: IntoIterator<Item = (String, Option<String>)>>(
        &mut self,
        listed: I,
    ) -> usize {
        let mut new: Vec<(String, Option<String>)> = Vec::new();
        for (key, etag) in listed {
            match self.inventories.iter_mut().find(|i| i.key == key) {
                Some(known) => {
                    if known.etag.is_none() && !known.is_complete() {
                        known.etag = etag;
                    }
                }
                None => new.push((key, etag)),
            }
        }
        new.sort();
        new.dedup_by(|a, b| a.0 == b.0);
        let added = new.len();
        self.inventories
            .extend(new.into_iter().map(|(key, etag)| InventoryProgress {
                key,
                total_rows: None,
                rows_submitted: 0,
                page_map: None,
                etag,
            }));
        added
    }

    /// The unfinished inventories whose object under their key is not the one the tracker
    /// took up (listed with another ETag): its rows are not the rows counted so far, and
    /// feeding on would skip some granules and submit others twice. (key, pinned, listed).
    pub fn replaced<'a>(
        &self,
        listed: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
    ) -> Vec<(String, String, String)> {
        listed
            .into_iter()
            .filter_map(|(key, etag)| {
                let known = self.inventories.iter().find(|i| i.key == key)?;
                let (pinned, now) = (known.etag.as_deref()?, etag?);
                (pinned != now && !known.is_complete())
                    .then(|| (key.to_owned(), pinned.to_owned(), now.to_owned()))
            })
            .collect()
    }

    /// The first inventory not yet fully submitted.
    pub fn current(&self) -> Option<&InventoryProgress> {
        self.inventories.iter().find(|i| !i.is_complete())
    }

    pub fn is_complete(&self) -> bool {
        self.current().is_none()
    }

    fn find_mut(&mut self, key: &str) -> Result<&mut InventoryProgress, TrackerError> {
        self.inventories
            .iter_mut()
            .find(|i| i.key == key)
            .ok_or_else(|| TrackerError::UnknownInventory(key.to_owned()))
    }

    pub fn set_total_rows(&mut self, key: &str, total: u64) -> Result<(), TrackerError> {
        let inv = self.find_mut(key)?;
        match inv.total_rows {
            Some(recorded) if recorded != total => Err(TrackerError::TotalChanged {
                key: key.to_owned(),
                recorded,
                found: total,
            }),
            _ => {
                inv.total_rows = Some(total);
                Ok(())
            }
        }
    }

    /// Moves an inventory's position forward to `to` rows submitted.
    pub fn advance_to(&mut self, key: &str, to: u64) -> Result<(), TrackerError> {
        let inv = self.find_mut(key)?;
        let ok = to >= inv.rows_submitted && inv.total_rows.is_none_or(|t| to <= t);
        if !ok {
            return Err(TrackerError::BadAdvance {
                key: key.to_owned(),
                from: inv.rows_submitted,
                to,
                total: inv.total_rows,
            });
        }
        inv.rows_submitted = to;
        Ok(())
    }

    /// Keeps `map` as the inventory's page map (or forgets it, with `None`).
    pub fn set_page_map(&mut self, key: &str, map: Option<PageMap>) -> Result<(), TrackerError> {
        self.find_mut(key)?.page_map = map;
        Ok(())
    }

    pub fn rows_submitted(&self) -> u64 {
        self.inventories.iter().map(|i| i.rows_submitted).sum()
    }

    /// Records the current position at `at` (see [`crate::domain::progress::record_sample`]).
    pub fn sample(&mut self, at: DateTime<Utc>) {
        let rows = self.rows_submitted();
        crate::domain::progress::record_sample(&mut self.samples, at, rows);
    }

    /// Total rows over all inventories whose size is known.
    pub fn rows_known(&self) -> u64 {
        self.inventories.iter().filter_map(|i| i.total_rows).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tracker() -> Tracker {
        let mut t = Tracker::default();
        t.add_inventories(["inv/b.parquet".to_owned(), "inv/a.parquet".to_owned()]);
        t
    }

    #[test]
    fn inventories_are_taken_in_key_order_and_kept_in_place() {
        let mut t = tracker();
        assert_eq!(t.current().unwrap().key, "inv/a.parquet");
        assert_eq!(
            t.add_inventories(["inv/0.parquet".to_owned(), "inv/a.parquet".to_owned()]),
            1
        );
        // a late arrival goes to the back, it does not jump the queue
        assert_eq!(t.inventories.last().unwrap().key, "inv/0.parquet");
        assert_eq!(t.current().unwrap().key, "inv/a.parquet");
    }

    #[test]
    fn advance_moves_forward_within_total() {
        let mut t = tracker();
        t.set_total_rows("inv/a.parquet", 10).unwrap();
        t.advance_to("inv/a.parquet", 4).unwrap();
        assert!(matches!(
            t.advance_to("inv/a.parquet", 3),
            Err(TrackerError::BadAdvance { .. })
        ));
        assert!(matches!(
            t.advance_to("inv/a.parquet", 11),
            Err(TrackerError::BadAdvance { .. })
        ));
        t.advance_to("inv/a.parquet", 10).unwrap();
        assert_eq!(t.current().unwrap().key, "inv/b.parquet");
        assert!(
            !t.is_complete(),
            "b's size is unknown, so it is not complete"
        );
        t.set_total_rows("inv/b.parquet", 0).unwrap();
        assert!(t.is_complete());
        assert_eq!(t.rows_submitted(), 10);
    }

    #[test]
    fn unknown_inventory_and_changed_total_are_errors() {
        let mut t = tracker();
        assert!(matches!(
            t.advance_to("nope", 1),
            Err(TrackerError::UnknownInventory(_))
        ));
        t.set_total_rows("inv/a.parquet", 10).unwrap();
        t.set_total_rows("inv/a.parquet", 10).unwrap();
        assert!(matches!(
            t.set_total_rows("inv/a.parquet", 11),
            Err(TrackerError::TotalChanged { .. })
        ));
    }

    #[test]
    fn serde_round_trip() {
        let mut t = tracker();
        t.set_total_rows("inv/a.parquet", 5).unwrap();
        let back: Tracker = serde_json::from_str(&serde_json::to_string(&t).unwrap()).unwrap();
        assert_eq!(back, t);
    }

    #[test]
    fn an_unfinished_inventory_listed_with_another_etag_is_replaced() {
        let mut t = Tracker::default();
        let listed = |a: &str, b: &str| {
            vec![
                ("a.parquet".to_owned(), Some(a.to_owned())),
                ("b.parquet".to_owned(), Some(b.to_owned())),
            ]
        };
        assert_eq!(t.add_listed(listed("e1", "f1")), 2);
        let as_listed = |l: &[(String, Option<String>)]| {
            l.iter()
                .map(|(k, e)| (k.clone(), e.clone()))
                .collect::<Vec<_>>()
        };
        let now = as_listed(&listed("e1", "f2"));
        let replaced = t.replaced(now.iter().map(|(k, e)| (k.as_str(), e.as_deref())));
        assert_eq!(
            replaced,
            vec![("b.parquet".into(), "f1".into(), "f2".into())]
        );
        // Finished, it may change: its rows are all submitted.
        t.set_total_rows("b.parquet", 3).unwrap();
        t.advance_to("b.parquet", 3).unwrap();
        assert!(t
            .replaced(now.iter().map(|(k, e)| (k.as_str(), e.as_deref())))
            .is_empty());
        // An inventory taken up before pins were kept is pinned by the next listing.
        let mut old = Tracker::default();
        old.add_inventories(["a.parquet".to_owned()]);
        old.add_listed(vec![("a.parquet".to_owned(), Some("e1".to_owned()))]);
        assert_eq!(old.inventories[0].etag.as_deref(), Some("e1"));
    }
}
